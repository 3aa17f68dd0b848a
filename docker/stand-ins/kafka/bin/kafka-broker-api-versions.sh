#!/usr/bin/env bash
# As the distribution's script of this name: org.apache.kafka.tools.BrokerApiVersionsCommand.
exec /opt/kafka/bin/kafka-run-class.sh org.apache.kafka.tools.BrokerApiVersionsCommand "$@"
