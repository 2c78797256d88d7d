"""The chaos run's own RabbitMQ node, listening on loopback and on the veth host address.

:class:`tests.brokers.RabbitMQNode` binds one address (``RABBITMQ_NODE_IP_ADDRESS``); workers inside
the namespace cannot reach the host's loopback, so this node takes its listeners from a
``rabbitmq.conf`` instead: the same port on 127.0.0.1 (the harness publishes and inspects there)
and on the veth address (every worker consumes there). ``loopback_users = none`` lets ``guest``
log in over the veth address; neither address leaves this machine.
"""

from __future__ import annotations

from pathlib import Path

from tests.brokers import RabbitMQNode


class ChaosRabbitMQ(RabbitMQNode):
    def __init__(self, base: Path, also_listen: str):
        super().__init__(base)
        self.also_listen = also_listen

    def env(self) -> dict[str, str]:
        env = super().env()
        env.pop("RABBITMQ_NODE_IP_ADDRESS", None)
        env.pop("RABBITMQ_NODE_PORT", None)
        (self.base / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{self.port}\n"
            f"listeners.tcp.2 = {self.also_listen}:{self.port}\n"
            "loopback_users = none\n"
            # a partitioned consumer's connection is declared dead after 2 missed heartbeats
            "heartbeat = 5\n"
        )
        return env

    def spout_conf(self, queue: str) -> dict[str, object]:
        """``rabbitmq.*`` topology keys for workers anywhere (host or namespace)."""
        return {
            "rabbitmq.host": self.also_listen,
            "rabbitmq.port": self.port,
            "rabbitmq.queue": queue,
            "rabbitmq.heartbeat.secs": 5,
            "rabbitmq.reconnect.max.delay.ms": 1000,
        }
