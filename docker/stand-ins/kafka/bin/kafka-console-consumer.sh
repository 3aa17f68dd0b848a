#!/usr/bin/env bash
# As the distribution's script of this name: org.apache.kafka.tools.consumer.ConsoleConsumer.
exec /opt/kafka/bin/kafka-run-class.sh org.apache.kafka.tools.consumer.ConsoleConsumer "$@"
