# Run one worker command and record how it ended.  POSIX sh (run as /bin/sh shim.sh).
#
#   /bin/sh shim.sh WORKER_DIR [--lease FILE] [--reset-signals env|PYTHON] -- COMMAND [ARGS...]
#
# The process runtime starts this in a new session. It starts COMMAND in a process group
# of its own (setsid), forwards stop signals to that group (holding any that arrive before
# the group exists), and writes result.json with the exit code (signal n -> 128 + n) when
# COMMAND ends. Because the shim outlives COMMAND even when the group is SIGKILLed, the exit
# code survives an agent restart: the next agent reads the file instead of needing to be
# COMMAND's parent.
#
# With --lease the shim also fences its command: the agent renews the lease file after every
# heartbeat the portal answers (`"valid_until_uptime_cs"`: hundredths of a second since boot,
# as /proc/uptime counts them, so a shell compares it without starting a process); if the lease runs out
# -- the agent crashed, or it has been cut off from the portal past its disconnect limit --
# the shim stops the command (SIGTERM, then SIGKILL 10 s later) so a gang the
# portal requeues elsewhere never runs twice. A missing or unreadable lease fences nothing.
#
# Why sh and not Python: starting an interpreter cost ~16 ms of CPU per worker, a shell
# ~0.7 ms (docs/benchmarks.md, "Submit to running"). Builtins only on the common path
# (read, printf, kill, wait, trap); the processes it starts are setsid (exec'd into the
# command) and, while COMMAND runs, one `sleep` per lease poll.
#
# Variables are prefixed _berth_ because the worker's environment is the shell's: an
# imported variable that the script assigned would reach COMMAND changed (so a job's own
# _berth_* variables are not passed on as they were). Nothing here splits words on $IFS,
# which the job's environment may set.

_berth_dir=$1
shift
_berth_lease=
_berth_reset=
while :; do
    case $1 in
    --lease) _berth_lease=$2 && shift 2 ;;
    --reset-signals) _berth_reset=$2 && shift 2 ;;
    *) break ;;
    esac
done
# A shell without job control starts a background command with SIGINT and SIGQUIT
# ignored, and an ignored signal stays ignored across exec: a job would never see a
# SIGINT stop order (and Python would install no KeyboardInterrupt). `--reset-signals env`
# puts them back with env --default-signal (coreutils 8.31+); `--reset-signals PYTHON`
# with that interpreter, where env cannot (slow: an interpreter per worker, as before).
_berth_reset_py='import os, signal, sys
for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGPIPE, signal.SIGXFSZ):
    signal.signal(s, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])'
if [ "$1" != "--" ] || [ $# -lt 2 ]; then
    echo "usage: shim.sh WORKER_DIR [--lease FILE] [--reset-signals env|PYTHON] -- COMMAND [ARGS...]" >&2
    exit 2
fi
shift
# Fixed here, not read from the environment: that is the job's, and a job must not be
# able to put off its own fence.
_berth_poll=1
_berth_grace=10

# Files are written by one printf, so in one write(2): a reader sees them empty or whole
# (the agent's readers take an empty or half file as "not written yet"). result.json has
# no time: the runtime takes its modification time as the moment COMMAND ended.
_berth_result() {  # exit code, error text (already JSON-escaped)
    printf '{"exit_code": %s, "error": "%s"}' "$1" "$2" >"$_berth_dir/result.json"
}

_berth_start_ticks() {  # field 22 of /proc/PID/stat (start time in clock ticks since boot)
    local IFS
    IFS=' '
    read -r _berth_stat <"/proc/$1/stat" || return 1
    set -- ${_berth_stat##*) }
    _berth_ticks=${20}
}

_berth_child=
_berth_forward() {
    if [ -z "$_berth_child" ]; then
        eval "_berth_held_$1=1"  # held until the group exists
    else
        _berth_send "$1"
    fi
}
# To the group; until setsid has made it (a moment after the fork) to the process itself.
_berth_send() {
    kill -s "$1" -- "-$_berth_child" 2>/dev/null || kill -s "$1" "$_berth_child" 2>/dev/null
}
for _berth_sig in TERM INT HUP QUIT USR1 USR2; do
    # shellcheck disable=SC2064
    trap "_berth_forward $_berth_sig" "$_berth_sig"
done

# The pid file doubles as "ready": from now on a stop signal is forwarded, not fatal.
_berth_start_ticks $$
printf '{"pid": %s, "start": %s}' "$$" "${_berth_ticks:-null}" >"$_berth_dir/pid"

case $1 in
*/*) [ -f "$1" ] && [ -x "$1" ] ;;
*) command -v "$1" >/dev/null 2>&1 ;;
esac
if [ $? -ne 0 ]; then
    case $1 in
    */*) [ -e "$1" ] ;;
    *) false ;;
    esac && _berth_code=126 _berth_why="Permission denied" || _berth_code=127 _berth_why="No such file or directory"
    echo "berth: cannot start '$1': $_berth_why" >&2
    _berth_name=$(printf '%s' "$1" | sed 's/[\\"]/\\&/g; s/[[:cntrl:]]/?/g')
    _berth_result "$_berth_code" "cannot start '$_berth_name': $_berth_why"
    exit "$_berth_code"
fi

# setsid(1) makes COMMAND the leader of a new session and process group, without a fork.
case $_berth_reset in
env) setsid -- env --default-signal=INT,QUIT "$@" & ;;
'') setsid -- "$@" & ;;
*) setsid -- "$_berth_reset" -I -S -c "$_berth_reset_py" "$@" & ;;
esac
_berth_child=$!
printf '%s' "$_berth_child" >"$_berth_dir/child.pid"
for _berth_sig in TERM INT HUP QUIT USR1 USR2; do
    if eval "[ -n \"\${_berth_held_$_berth_sig-}\" ]"; then
        _berth_send "$_berth_sig"
    fi
done

_berth_fencer=
if [ -n "$_berth_lease" ]; then
    (
        trap - TERM INT HUP QUIT USR1 USR2
        while sleep "$_berth_poll"; do
            # COMMAND's group gone (the shim too, say SIGKILLed): nothing left to fence,
            # and a later process may take its number
            kill -s 0 -- "-$_berth_child" 2>/dev/null || exit 0
            IFS= read -r _berth_l <"$_berth_lease" 2>/dev/null
            case $_berth_l in
            *'"valid_until_uptime_cs": '[0-9]*) ;;
            *) continue ;;
            esac
            _berth_until=${_berth_l#*\"valid_until_uptime_cs\": }
            _berth_until=${_berth_until%%[!0-9]*}
            IFS=' ' read -r _berth_up _berth_idle </proc/uptime  # "12345.67 …": seconds since boot
            [ "${_berth_up%.*}${_berth_up#*.}" -ge "$_berth_until" ] || continue
            echo "berth: the agent's lease expired (agent gone or cut off from the portal); stopping the worker" >&2
            _berth_send TERM
            _berth_waited=0
            while [ "$_berth_waited" -lt "$_berth_grace" ] && kill -s 0 -- "-$_berth_child" 2>/dev/null; do
                sleep 1
                _berth_waited=$((_berth_waited + 1))
            done
            kill -s KILL -- "-$_berth_child" 2>/dev/null
            exit 0
        done
    ) &
    _berth_fencer=$!
fi

# wait returns early when a trapped signal arrives: wait again until COMMAND is gone.
while :; do
    wait "$_berth_child" 2>/dev/null
    _berth_code=$?
    kill -s 0 "$_berth_child" 2>/dev/null || break
done
kill -s KILL -- "-$_berth_child" 2>/dev/null  # stragglers left in the group, as a container's end would
if [ -n "$_berth_fencer" ]; then
    kill -s KILL "$_berth_fencer" 2>/dev/null
fi
_berth_result "$_berth_code" ""
exit "$_berth_code"
