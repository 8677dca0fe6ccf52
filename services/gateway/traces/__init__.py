"""Query traces: the store and the OpenTelemetry spans."""
