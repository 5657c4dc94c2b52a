//! Tool plugins: the [`Tool`] trait and [`export_tools!`](crate::export_tools).

use crate::bindings::tool::exports::warden::plugin::tool as wit;
use crate::{Context, Error, Output, Value};

/// One tool. Implement it on a unit struct and list the struct in
/// [`export_tools!`](crate::export_tools).
pub trait Tool {
    /// The arguments, decoded from the model's JSON. A decoding failure is
    /// reported to the model as invalid arguments, naming the field.
    type Args: serde::de::DeserializeOwned;
    /// The name the model calls.
    const ID: &'static str;
    /// What the tool does, for the model.
    const DESCRIPTION: &'static str;
    /// JSON Schema of the arguments object.
    fn parameters() -> Value;
    /// Run one call.
    fn execute(ctx: &Context, args: Self::Args) -> Result<Output, Error>;
}

#[doc(hidden)]
pub fn __spec<T: Tool>() -> wit::ToolSpec {
    wit::ToolSpec {
        id: T::ID.to_string(),
        description: T::DESCRIPTION.to_string(),
        parameters: T::parameters().to_string(),
    }
}

#[doc(hidden)]
pub fn __run<T: Tool>(
    ctx: wit::CallContext,
    arguments: &str,
) -> Result<wit::ToolOutput, wit::ToolError> {
    let args: T::Args = serde_json::from_str(arguments).map_err(|e| {
        Error::InvalidArguments(format!(
            "the arguments for `{}` do not fit its parameters: {e}",
            T::ID
        ))
        .into_wit()
    })?;
    T::execute(&Context::from(ctx), args)
        .map(Output::into_wit)
        .map_err(Error::into_wit)
}

#[doc(hidden)]
pub fn __unknown(tool: &str, known: &[&str]) -> wit::ToolError {
    wit::ToolError::Failed(format!(
        "this plugin has no tool `{tool}`; it provides: {}",
        known.join(", ")
    ))
}

/// Export a list of [`Tool`]s as this component's `tool` interface.
///
/// ```ignore
/// warden_plugin_sdk::export_tools!(Read, Write);
/// ```
#[macro_export]
macro_rules! export_tools {
    ($($tool:ty),+ $(,)?) => {
        #[doc(hidden)]
        pub struct __WardenTools;

        impl $crate::bindings::tool::exports::warden::plugin::tool::Guest for __WardenTools {
            fn describe() -> ::std::vec::Vec<$crate::bindings::tool::exports::warden::plugin::tool::ToolSpec> {
                ::std::vec![$($crate::__spec::<$tool>()),+]
            }

            fn execute(
                ctx: $crate::bindings::tool::exports::warden::plugin::tool::CallContext,
                tool: ::std::string::String,
                arguments: ::std::string::String,
            ) -> ::std::result::Result<
                $crate::bindings::tool::exports::warden::plugin::tool::ToolOutput,
                $crate::bindings::tool::exports::warden::plugin::tool::ToolError,
            > {
                $(
                    if tool == <$tool as $crate::Tool>::ID {
                        return $crate::__run::<$tool>(ctx, &arguments);
                    }
                )+
                Err($crate::__unknown(&tool, &[$(<$tool as $crate::Tool>::ID),+]))
            }
        }

        $crate::bindings::tool::__export_tool_plugin!(__WardenTools with_types_in $crate::bindings::tool);
    };
}
