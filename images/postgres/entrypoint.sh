#!/bin/sh
# Entrypoint of images/postgres: on the first start (empty $PGDATA) create the cluster with the
# superuser $POSTGRES_USER (password $POSTGRES_PASSWORD, scram-sha-256 over TCP; the unix socket
# inside the container trusts local users) and the database $POSTGRES_DB, then run the command
# (`postgres ...`) as the postgres user. The same variables as the official image's entrypoint.
set -eu
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
if [ -z "${POSTGRES_PASSWORD:-}" ]; then
  echo "postgres-entrypoint: POSTGRES_PASSWORD is empty; refusing to create a database without a password" >&2
  exit 1
fi
as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
mkdir -p "$PGDATA" /run/postgresql
chown postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile="$(mktemp)"
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  chown postgres "$pwfile"
  as_pg initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  # Only the socket while the database is created: nothing listens on TCP yet.
  as_pg pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  if [ "$POSTGRES_DB" != postgres ]; then
    as_pg psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres -qc "CREATE DATABASE \"$POSTGRES_DB\""
  fi
  as_pg pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  echo "postgres-entrypoint: created database $POSTGRES_DB (owner $POSTGRES_USER) in $PGDATA"
fi
if [ "${1:-}" = postgres ]; then
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$@"
fi
exec "$@"
