//! Permission names as tools give them: a plugin manifest, a `--tool`
//! flag, a tool mapping in the config or a guest's own question each name
//! one permission, checked here the same way everywhere.

/// The longest permission name or pattern taken from anyone but the
/// operator's config.
pub const MAX_NAME: usize = 256;

/// Whether a text is free of the wildcard characters.
pub fn is_literal(s: &str) -> bool {
    !s.contains(['*', '?'])
}

/// Permission names only the operator's rules may use: the hook switches
/// and the doom-loop guard.
pub fn reserved(permission: &str) -> bool {
    permission.starts_with("hook") || permission == "doom_loop"
}

/// Check a permission name that a plugin manifest, a `--tool` flag, a tool
/// mapping or a guest's own question gives: one literal name (no globs,
/// so an `always` answer for it can never cover other permissions), not
/// reserved (`hook.*`, `doom_loop`), no control characters.
pub fn check_name(permission: &str) -> Result<(), String> {
    if permission.is_empty() || permission.len() > MAX_NAME {
        return Err(format!(
            "the permission name must be 1 to {MAX_NAME} bytes, not {}",
            permission.len()
        ));
    }
    if !is_literal(permission) {
        return Err(format!(
            "the permission {:?} is a glob; a tool or plugin names one literal permission (rules may use globs, a tool may not)",
            warden_protocol::text::shown(permission)
        ));
    }
    if reserved(permission) {
        return Err(format!(
            "the permission {permission:?} is reserved for the operator's rules (hook switches and the doom-loop guard)"
        ));
    }
    if permission.chars().any(char::is_control) {
        return Err("the permission name has control characters".into());
    }
    Ok(())
}
