"""delayq's version: the package's (``pyproject.toml`` reads it from here), the OpenAPI document's,
and the one a Lambda bundle reports, where the package is copied without its metadata."""

VERSION = "0.3.0"
