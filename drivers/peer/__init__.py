"""What the peer-broker drivers (NATS, Redis, MQTT) share: the `client` section of their driver
files, a gevent connection shell that reads at the wire like the native Pulsar driver's, and
the grouping of identical deliveries of one read."""
