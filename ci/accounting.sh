# shellcheck shell=bash
# Slurm accounting for ci/slurm-up's single-node cluster, so that sacct answers as at every site:
# MariaDB (Debian's mariadb-server: a data directory, socket and port of its own, on 127.0.0.1 only)
# and slurmdbd (Debian's, the same version as slurmctld), the cluster and the users registered with
# sacctmgr. No systemd: each daemon is started directly, in its own session, and waited on until it
# answers, with a deadline; its log is in ACCT_LOG. Idempotent: a re-run with unchanged files leaves
# running daemons alone, a changed file restarts that daemon. Sourced by ci/slurm-up, which sets:
#   ACCT_ETC      the cluster's config directory: slurm.conf is there; slurmdbd.conf and mariadb.cnf go there
#   ACCT_RUN      slurmdbd's pid file (slurm's directory)      ACCT_LOG  slurmdbd.log, mariadb.log
#   ACCT_DB_DIR   MariaDB's data directory                      ACCT_DB_RUN  its socket and pid file
#   ACCT_DB_PORT  MariaDB's port    ACCT_DBD_PORT  slurmdbd's   ACCT_CLUSTER  the ClusterName
#   ACCT_USERS    the users given an association (account "hpk") on the cluster
# and provides write_file (ci/slurm-up), ts, alive and stop_pidfile (ci/lib.sh).

# acct_slurm_conf: slurm.conf's accounting lines (in common_conf's place of the two "none" lines).
# job_comment: sacct -o Comment shows a job's comment (22.05 stores it only with this flag); steps record
# their CPU time and memory through jobacct_gather/linux. AccountingStorageEnforce stays unset (0): no
# limits or associations are checked, so jobs run exactly as without accounting.
acct_slurm_conf() {
  cat <<EOF
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=${ACCT_DBD_PORT}
AccountingStoreFlags=job_comment
EOF
}

# acct_wait WHAT SECONDS CMD...: run CMD every 0.2 s until it succeeds; fail naming WHAT after SECONDS
acct_wait() {
  local what=$1 limit=$2 deadline=$(( SECONDS + $2 )); shift 2
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "slurm-up: $what did not answer within $limit s: $*" >&2
      return 1
    fi
    sleep 0.2
  done
}

acct_mariadb_up() {
  local cnf=$ACCT_ETC/mariadb.cnf
  install -d -o mysql -g mysql -m 0750 "$ACCT_DB_DIR"
  install -d -o mysql -g mysql -m 0755 "$ACCT_DB_RUN"
  touch "$ACCT_LOG/mariadb.log"; chown mysql:mysql "$ACCT_LOG/mariadb.log"; chmod 0640 "$ACCT_LOG/mariadb.log"
  # innodb_lock_wait_timeout: what Slurm's accounting guide asks for (slurmdbd warns below 900)
  if write_file "$cnf" "[mysqld]
datadir=$ACCT_DB_DIR
socket=$ACCT_DB_RUN/mysqld.sock
pid-file=$ACCT_DB_RUN/mysqld.pid
port=$ACCT_DB_PORT
bind-address=127.0.0.1
skip-name-resolve
log-error=$ACCT_LOG/mariadb.log
innodb_buffer_pool_size=64M
innodb_lock_wait_timeout=900
[client]
socket=$ACCT_DB_RUN/mysqld.sock
port=$ACCT_DB_PORT"; then
    stop_pidfile "$ACCT_DB_RUN/mysqld.pid"
    ts "config written: $cnf (MariaDB on 127.0.0.1:$ACCT_DB_PORT, data in $ACCT_DB_DIR)"
  fi
  if [ ! -d "$ACCT_DB_DIR/mysql" ]; then
    # root logs in through the socket as the system's root (no password); no test database
    mariadb-install-db --defaults-file="$cnf" --user=mysql --auth-root-authentication-method=socket \
      --skip-test-db >>"$ACCT_LOG/mariadb.log" 2>&1
    ts "MariaDB data directory created: $ACCT_DB_DIR"
  fi
  if ! alive "$ACCT_DB_RUN/mysqld.pid"; then
    setsid mariadbd --defaults-file="$cnf" --user=mysql </dev/null >>"$ACCT_LOG/mariadb.log" 2>&1 &
    acct_wait "MariaDB (log: $ACCT_LOG/mariadb.log)" 120 mariadb-admin --defaults-file="$cnf" ping
    ts "MariaDB started (pid $(cat "$ACCT_DB_RUN/mysqld.pid"))"
  fi
}

acct_slurmdbd_up() {
  local conf=$ACCT_ETC/slurmdbd.conf pass
  # the database password: kept from the file once made, so a re-run changes nothing
  pass=$(sed -n 's/^StoragePass=//p' "$conf" 2>/dev/null || true)
  [ -n "$pass" ] || pass=$(head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')
  # on stdin, not the command line: the password stays out of ps
  mariadb --defaults-file="$ACCT_ETC/mariadb.cnf" <<SQL
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
SQL
  touch "$conf.tmp.$$"; chown slurm:slurm "$conf.tmp.$$"; chmod 0600 "$conf.tmp.$$"  # write_file's mv keeps these
  if write_file "$conf" "AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$ACCT_DBD_PORT
SlurmUser=slurm
LogFile=$ACCT_LOG/slurmdbd.log
PidFile=$ACCT_RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$ACCT_DB_PORT
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=$pass"; then
    stop_pidfile "$ACCT_RUN/slurmdbd.pid"
    ts "config written: $conf (slurmdbd on 127.0.0.1:$ACCT_DBD_PORT)"
  fi
  rm -f "$conf.tmp.$$"
  if ! alive "$ACCT_RUN/slurmdbd.pid"; then
    # slurmdbd reads slurmdbd.conf from SLURM_CONF's directory; its first start creates the tables
    SLURM_CONF=$ACCT_ETC/slurm.conf slurmdbd
    acct_wait "slurmdbd (log: $ACCT_LOG/slurmdbd.log)" 300 acct_sacctmgr -n show cluster
    ts "slurmdbd started (pid $(cat "$ACCT_RUN/slurmdbd.pid"))"
  fi
}

acct_sacctmgr() { SLURM_CONF=$ACCT_ETC/slurm.conf sacctmgr "$@"; }

# acct_register: the cluster, the account "hpk" and each of ACCT_USERS in it (root has its own
# association once the cluster exists), each added only when missing
acct_register() {
  local u added=()
  if ! acct_sacctmgr -n -P show cluster format=cluster | grep -qx "$ACCT_CLUSTER"; then
    acct_sacctmgr -i add cluster "$ACCT_CLUSTER" >/dev/null; added+=("cluster $ACCT_CLUSTER")
  fi
  if ! acct_sacctmgr -n -P show assoc where cluster="$ACCT_CLUSTER" account=hpk format=account | grep -qx hpk; then
    acct_sacctmgr -i add account hpk cluster="$ACCT_CLUSTER" description="hpkctl tests" organization=hpk >/dev/null
    added+=("account hpk")
  fi
  for u in $ACCT_USERS; do
    if ! acct_sacctmgr -n -P show assoc where cluster="$ACCT_CLUSTER" user="$u" format=user | grep -qx "$u"; then
      acct_sacctmgr -i add user "$u" account=hpk cluster="$ACCT_CLUSTER" >/dev/null; added+=("user $u")
    fi
  done
  [ ${#added[@]} = 0 ] || ts "registered with slurmdbd: ${added[*]}"
}

# accounting_up: MariaDB, slurmdbd, the registrations; before slurmctld (re)starts with slurm.conf's
# accounting lines, so that it finds its cluster registered
accounting_up() {
  acct_mariadb_up
  acct_slurmdbd_up
  acct_register
}
