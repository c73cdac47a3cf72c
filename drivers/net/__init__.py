"""The network layer every driver shares: sockets, kernel receive times, and the receive
engine that drains thousands of sockets from one greenlet (reactor.py) and hands deliveries to
the harness grouped by message (deliveries.py); TLS without losing the kernel's receive times
(tls.py, sans-IO over the engine's own stamped reads).

Protocol-neutral: the Pulsar driver and the peer drivers (NATS, Redis, MQTT) sit on it, and it
imports neither.
"""
