// Starts Swagger UI (swagger-ui-bundle.js, vendored from npm's swagger-ui-dist) on this
// server's OpenAPI document. A file of its own: the page's CSP allows no inline script.
"use strict";

window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
  deepLinking: true,
  // nothing leaves this server: no document sent to validator.swagger.io
  validatorUrl: null,
  // the key typed into "Authorize" lasts as long as the page (never stored)
  persistAuthorization: false,
  displayRequestDuration: true,
  defaultModelsExpandDepth: 0,
});
