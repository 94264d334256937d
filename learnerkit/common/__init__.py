"""The ground the host tool stands on: errors, output, YAML loading, the Docker engine, the project root."""
