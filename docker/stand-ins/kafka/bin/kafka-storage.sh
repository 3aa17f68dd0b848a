#!/usr/bin/env bash
# As the distribution's script of this name: kafka.tools.StorageTool.
exec /opt/kafka/bin/kafka-run-class.sh kafka.tools.StorageTool "$@"
