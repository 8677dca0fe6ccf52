"""The gateway's front doors: REST (FastAPI), gRPC servicer and the OpenAI-compatible routes."""
