"""Observability: statistics, Prometheus metrics, custom metrics, tracing, logs.

Imported by every layer; imports only settings, types and the standard
libraries it wraps (prometheus-client, OpenTelemetry lazily).
"""
