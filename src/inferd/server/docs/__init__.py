"""OpenAPI description and Swagger UI pages of the REST API."""
