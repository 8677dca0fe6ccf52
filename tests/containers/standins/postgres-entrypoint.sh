#!/bin/sh
# What the official postgres image does on start, with Debian's PostgreSQL 15: on an empty data
# directory, a cluster whose superuser is $POSTGRES_USER (password $POSTGRES_PASSWORD, scram-sha-256
# from the network) and a database $POSTGRES_DB; then the server on every interface, as `postgres`.
set -eu
data=/var/lib/postgresql/data
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
mkdir -p "$data" /var/run/postgresql
chown postgres:postgres "$data" /var/run/postgresql
chmod 700 "$data"
if [ ! -s "$data/PG_VERSION" ]; then
    password_file=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$password_file"
    chown postgres "$password_file"
    as_postgres initdb -D "$data" -U "$POSTGRES_USER" --pwfile="$password_file" \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f "$password_file"
    echo "host all all all scram-sha-256" >>"$data/pg_hba.conf"
    echo "CREATE DATABASE \"$POSTGRES_DB\" OWNER \"$POSTGRES_USER\";" \
        | as_postgres postgres --single -D "$data" postgres >/dev/null
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups postgres -D "$data" -c listen_addresses='*'
