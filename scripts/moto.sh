# Sourced by the scripts that need an S3 server: `start_moto VENV` starts moto's server
# from VENV (scripts/s3_venv.sh) on a free loopback port, exports the AWS_* variables that
# point tfshard and boto3 at it, waits until it accepts connections, and stops it when
# the script exits.
start_moto() {
  local venv=$1 port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >/dev/null 2>&1 &
  moto_pid=$!
  trap 'kill $moto_pid 2>/dev/null || true' EXIT
  export AWS_ACCESS_KEY_ID=moto AWS_SECRET_ACCESS_KEY=moto AWS_REGION=us-east-1 \
    AWS_ENDPOINT_URL="http://127.0.0.1:$port" AWS_ALLOW_HTTP=true
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return; sleep 0.1; done
  echo "moto_server did not start" >&2
  return 1
}
