#!/usr/bin/env bash
# Runs a class with Kafka's jars: the part of the distribution's kafka-run-class.sh the other scripts use.
main="$1"
shift
# shellcheck disable=SC2086 # option lists, as the distribution's script treats them
exec "${JAVA_HOME:-/usr}/bin/java" ${KAFKA_HEAP_OPTS:--Xmx256M} ${KAFKA_JVM_PERFORMANCE_OPTS:--XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true} \
    ${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=/opt/kafka/config/log4j2.yaml} ${KAFKA_OPTS:-} \
    -cp '/opt/kafka/libs/*' "$main" "$@"
