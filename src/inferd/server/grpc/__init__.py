"""The gRPC edge: the V2 servicer, its streams, health, access interceptors, the server."""
