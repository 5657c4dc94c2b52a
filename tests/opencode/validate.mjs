// Validates an OpenAPI document with @apidevtools/swagger-parser; prints
// {"valid", "openapi"} or {"valid": false, "error"}.
import SwaggerParser from "@apidevtools/swagger-parser";
import fs from "node:fs";

const doc = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
try {
  await SwaggerParser.validate(structuredClone(doc));
  console.log(JSON.stringify({ valid: true, openapi: doc.openapi }));
} catch (e) {
  console.log(JSON.stringify({ valid: false, error: String(e.message || e) }));
  process.exitCode = 1;
}
