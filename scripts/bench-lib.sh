# Shared by the measuring scripts (bench-instructions, bench-cpu, heap-profile), which source
# it: a free port, Mosquitto with TCP_NODELAY on one, and the wait for an agent to be listed.

# A free TCP port on loopback.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# start_mosquitto DIR [CONFIG_LINE...]: Mosquitto (TCP_NODELAY, nothing persisted, the extra
# lines added to its config) on a free port, its config and log in DIR. Sets MQTT_PORT and
# MQTT_PID, and returns once it accepts connections (fails with its log after 5 s).
start_mosquitto() {
    local dir=$1 mosquitto
    shift
    MQTT_PORT=$(free_port)
    {
        printf 'listener %s 127.0.0.1\nallow_anonymous true\nset_tcp_nodelay true\npersistence false\n' "$MQTT_PORT"
        [ $# -eq 0 ] || printf '%s\n' "$@"
    } > "$dir/m.conf"
    mosquitto=$(command -v mosquitto || echo /usr/sbin/mosquitto)
    "$mosquitto" -c "$dir/m.conf" > "$dir/mosquitto.log" 2>&1 &
    MQTT_PID=$!
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$MQTT_PORT") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "Mosquitto did not listen on port $MQTT_PORT:" >&2
    cat "$dir/mosquitto.log" >&2
    return 1
}

# wait_listed HTTP_PORT AGENT SECONDS [LOG...]: waits until the gateway on HTTP_PORT lists
# AGENT; after SECONDS prints the logs given and fails.
wait_listed() {
    local port=$1 agent=$2 seconds=$3
    shift 3
    for _ in $(seq $((seconds * 10))); do
        curl -sf "http://127.0.0.1:$port/agents" 2>/dev/null | grep -q "\"$agent\"" && return 0
        sleep 0.1
    done
    echo "$agent was not listed within $seconds s:" >&2
    [ $# -eq 0 ] || cat "$@" >&2
    return 1
}
