#!/usr/bin/env bash
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx1G -Xms1G}" exec /opt/kafka/bin/kafka-run-class.sh kafka.Kafka "$@"
