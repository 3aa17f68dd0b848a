#!/usr/bin/env bash
# The official postgres image's entry point, as far as this project's compose file and
# Testcontainers use it: POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB, POSTGRES_INITDB_ARGS,
# POSTGRES_HOST_AUTH_METHOD, PGDATA, /docker-entrypoint-initdb.d/*.sql and *.sh, arguments that
# begin with "-" passed to postgres, and the two "database system is ready to accept connections"
# lines of a first start (a server for the initialisation, then the real one) that Testcontainers
# waits for.
set -Eeo pipefail

if [ "${1:0:1}" = '-' ]; then
    set -- postgres "$@"
fi

if [ "$1" != 'postgres' ]; then
    exec "$@"
fi

if [ "$(id -u)" = '0' ]; then
    mkdir -p "$PGDATA"
    chown postgres:postgres "$PGDATA"
    chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$BASH_SOURCE" "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "${POSTGRES_HOST_AUTH_METHOD:-}" != 'trust' ]; then
        echo >&2 'Error: Database is uninitialized and superuser password is not specified.'
        echo >&2 '       Set POSTGRES_PASSWORD (or POSTGRES_HOST_AUTH_METHOD=trust, which is not safe).'
        exit 1
    fi
    user="${POSTGRES_USER:-postgres}"
    db="${POSTGRES_DB:-$user}"
    auth="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}"
    # shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of arguments, as in the official image
    initdb --username="$user" --pwfile=<(printf '%s\n' "${POSTGRES_PASSWORD:-}") ${POSTGRES_INITDB_ARGS:-}
    printf "\nlisten_addresses = '*'\n" >> "$PGDATA/postgresql.conf"
    printf '\nhost all all all %s\n' "$auth" >> "$PGDATA/pg_hba.conf"

    # A server for the initialisation only, on the socket alone.
    pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p 5432" -w start
    export PGUSER="$user" PGPASSWORD="${POSTGRES_PASSWORD:-}"
    if [ "$db" != 'postgres' ]; then
        printf 'CREATE DATABASE :"db";\n' | psql -v ON_ERROR_STOP=1 --no-psqlrc --dbname postgres --set db="$db"
    fi
    shopt -s nullglob
    for f in /docker-entrypoint-initdb.d/*; do
        case "$f" in
            *.sh) echo "running $f"; . "$f" ;;
            *.sql) echo "running $f"; psql -v ON_ERROR_STOP=1 --no-psqlrc --dbname "$db" -f "$f" ;;
            *) echo "ignoring $f" ;;
        esac
    done
    unset PGPASSWORD
    pg_ctl -D "$PGDATA" -m fast -w stop
    echo
    echo 'PostgreSQL init process complete; ready for start up.'
    echo
fi

exec "$@"
