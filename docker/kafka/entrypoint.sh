#!/usr/bin/env bash
# Write server.properties from the environment, format the log directory on first start (it
# keeps its cluster id on the volume across restarts), then run the broker in the foreground.
set -euo pipefail

data=/var/lib/kafka/data
config=/var/lib/kafka/server.properties
host="$KAFKA_ADVERTISED_HOST"
listeners="PLAINTEXT://0.0.0.0:${KAFKA_PORT},CONTROLLER://127.0.0.1:${KAFKA_CONTROLLER_PORT}"
advertised="PLAINTEXT://${host}:${KAFKA_PORT}"
protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
sasl=""
if [[ -n "$KAFKA_SASL_PORT" ]]; then
    listeners+=",SASL://0.0.0.0:${KAFKA_SASL_PORT}"
    advertised+=",SASL://${host}:${KAFKA_SASL_PORT}"
    protocols+=",SASL:SASL_PLAINTEXT"
    users=""
    IFS=',' read -ra pairs <<< "$KAFKA_SASL_USERS"
    for pair in "${pairs[@]}"; do
        users+=" user_${pair%%:*}=\"${pair#*:}\""
    done
    sasl="sasl.enabled.mechanisms=PLAIN
listener.name.sasl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required${users};"
fi

cat > "$config" <<PROPERTIES
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:${KAFKA_CONTROLLER_PORT}
listeners=${listeners}
advertised.listeners=${advertised}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=${protocols}
log.dirs=${data}
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
${sasl}
${KAFKA_PROPERTIES}
PROPERTIES
chmod 0600 "$config"

java=(java "-Xms${KAFKA_HEAP}" "-Xmx${KAFKA_HEAP}" -XX:+UseG1GC -XX:MaxGCPauseMillis=20
      -Djava.awt.headless=true -cp "/opt/kafka/libs/*")
if [[ ! -f "$data/meta.properties" ]]; then
    cluster_id="$("${java[@]}" kafka.tools.StorageTool random-uuid)"
    "${java[@]}" kafka.tools.StorageTool format -t "$cluster_id" -c "$config"
fi
exec "${java[@]}" kafka.Kafka "$config"
