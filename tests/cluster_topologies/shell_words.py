"""An unmodified pystorm bolt (run as a subprocess by ``eo_kafka_composed``'s ShellBolt): each
Kafka record's value is a word; it emits it, anchored (pystorm acks after ``process``)."""

from pystorm import Bolt


class Words(Bolt):
    def process(self, tup):
        self.emit([tup.values[0]], anchors=[tup])


if __name__ == "__main__":
    Words().run()
