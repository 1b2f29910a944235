"""Every error a client can see, as named constants, and the one exception type that carries them.

Messages use Redis' own prefixes and texts (``ERR``, ``WRONGTYPE``, ``NOAUTH``, ``WRONGPASS``,
``NOPERM``, ``MOVED``, ``TRYAGAIN``, ``CLUSTERDOWN``, ``EXECABORT``) so that client libraries map
them to the right exception classes. A constant with ``{}`` fields is formatted by the caller.

Typed exceptions exist only where an error is control flow: the protocol layer's
``ProtocolError`` (closes one connection), ``Rejected`` (no call counted) and the store's errors
(``StoreError`` may pass, ``GuardFailed`` means step down, ``IdentityConflict`` means exit: the
store contract's, kept here so that the etcd client, below the store, raises them too).
"""

from __future__ import annotations


class CommandError(Exception):
    """A command failed; the dispatcher sends ``-<message>`` and the connection carries on."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Rejected(CommandError):
    """A request refused before it ran (unknown, wrong arity, NOAUTH, NOPERM, MOVED...): no call, as
    Redis counts calls (INFO commandstats ``rejected_calls``, not in LATENCY HISTOGRAM)."""


# --- the store's errors (the store contract's, raised by the etcd client too): control flow --------


class StoreError(Exception):
    """A store call failed in a way that may pass (I/O error, timeout, lost connection)."""


class GuardFailed(StoreError):
    """The guarded write was refused: leadership is gone, or the record changed behind our back."""


class StoreLocked(StoreError):
    """Another server already owns this store (for sqlite: the data dir's lock is held)."""


class StoreFull(StoreError):
    """The store is out of space (etcd's NOSPACE alarm): writes fail until an operator acts."""


class StoreRejected(StoreError):
    """The store will never accept this request (too large, invalid): retrying cannot help."""


class PrimaryServing(StoreError):
    """A restore write refused: a primary serves from this store (``primary``: its node id), and a
    record raised under it would not reach what it holds in memory (``march.store.contract``)."""

    def __init__(self, primary: str) -> None:
        super().__init__(f"a primary serves from this store ({primary})")
        self.primary = primary


class IdentityConflict(StoreError):
    """This process may not take part: its node id is held by another live process, or its data dir
    belongs to another deployment (another cluster, or a single node). Never retried: the node
    says why and exits (``march.cluster.directory``, ``march.cluster.identity``, ``march.store.membership``)."""


class LayoutChanged(IdentityConflict):
    """The cluster's layout (``march groups N``) is not the one this node's groups were built for:
    the node steps down from every group, gives their leader keys back, stops, and starts again in
    the new layout (``march.cli`` executes the same command line again, in the same process id)."""


# --- generic, word for word as Redis says them --------------------------------------------------
WRONG_ARITY = "ERR wrong number of arguments for '{}' command"
UNKNOWN_COMMAND = "ERR unknown command '{}', with args beginning with: {}"
UNKNOWN_SUBCOMMAND = "ERR unknown subcommand '{}'. Try {} HELP."
SYNTAX = "ERR syntax error"
NOT_INTEGER = "ERR value is not an integer or out of range"
OVERFLOW = "ERR increment or decrement would overflow"
PROTOCOL_VERSION = "NOPROTO unsupported protocol version"
DB_INDEX = "ERR DB index is out of range"
INVALID_CURSOR = "ERR invalid cursor"

HELLO_PROTOVER = "ERR Protocol version is not an integer or out of range"
HELLO_OPTION = "ERR Syntax error in HELLO option '{}'"
CLIENT_NAME = "ERR Client names cannot contain spaces, newlines or special characters."
CLIENT_NAME_TOO_LONG = "ERR Client names are at most {} bytes"  # (March's own: Redis has no limit)
CLIENT_INFO_VALUE = "ERR {} cannot contain spaces, newlines or special characters."
CLIENT_OPTION = "ERR Unrecognized option '{}'"
NO_SUCH_CLIENT = "ERR No such client"
CLIENT_ID = "ERR client-id should be greater than 0"
GETKEYS_NO_COMMAND = "ERR Invalid command specified"
GETKEYS_ARITY = "ERR Invalid number of arguments specified for command"
GETKEYS_NO_KEYS = "ERR The command has no key arguments"
NO_SHUTDOWN = "ERR No shutdown in progress."
PROTOCOL_ERROR = "ERR Protocol error: {}"
# what follows "Protocol error: ", as Redis words it
PROTO_EXPECTED = "expected '{}', got '{}'"
PROTO_TOO_BIG = "too big request"
PROTO_TOO_BIG_INLINE = "too big inline request"
PROTO_MULTIBULK_LENGTH = "invalid multibulk length"
PROTO_BULK_LENGTH = "invalid bulk length"
PROTO_UNBALANCED_QUOTES = "unbalanced quotes in request"
# before AUTH (Redis' limits for unauthenticated clients, CVE-2021-32675), and header lines with no end
PROTO_UNAUTH_MULTIBULK_LENGTH = "unauthenticated multibulk length"
PROTO_UNAUTH_BULK_LENGTH = "unauthenticated bulk length"
PROTO_TOO_BIG_MBULK_COUNT = "too big mbulk count string"
PROTO_TOO_BIG_BULK_COUNT = "too big bulk count string"

# --- authentication ----------------------------------------------------------------------------
NOAUTH = "NOAUTH Authentication required."
WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."
# (March's own) an AUTH refused unchecked: too many failures from this address or for this user just now
AUTH_THROTTLED = (
    "WRONGPASS too many failed AUTH attempts from this address or for this user; try again in a few seconds"
)
AUTH_NOT_CONFIGURED = (
    "ERR AUTH <password> called without any password configured for the default user. "
    "Are you sure your configuration is correct?"
)
HELLO_NOAUTH = (
    "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> "
    "AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol "
    "version at the same time"
)
PROTECTED_MODE = (
    "DENIED March is running in protected mode because no password is set for the default user. "
    "In this mode connections are only accepted from the loopback interface. Set a password with "
    "--requirepass (or requirepass in the config file), or disable protected mode with "
    "--protected-mode no, and restart the server."
)

# --- ACL ------------------------------------------------------------------------------------------
NOPERM_COMMAND = "NOPERM this user has no permissions to run the '{}' command"
NOPERM_KEY = "NOPERM this user has no permissions to access one of the keys used as arguments"
NOPERM_CHANNEL = "NOPERM this user has no permissions to access one of the channels used as arguments"
# EXEC of a command whose permission was revoked after MULTI queued it (Redis' multi.c, execCommand)
EXEC_NOPERM = (
    "NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. "
    "This command is no longer allowed for the following reason: {}"
)
EXEC_NOPERM_COMMAND = "no permission to execute the command or subcommand"
EXEC_NOPERM_KEY = "no permission to touch the specified keys"
EXEC_NOPERM_CHANNEL = "no permission to access one of the channels used as arguments"
NOPERM_CREATE = "NOPERM this user has no permissions to create the sequence '{}' (needs +seq.create or +@create)"
NOPERM_FLOOR = "NOPERM this user has no permissions to raise the floor of '{}' (needs +set or +@floor)"
NOPERM_SETTINGS = "NOPERM this user has no permissions to choose the settings of '{}' (needs +seq.alter or +@seqadmin)"
DRYRUN_COMMAND = "This user has no permissions to run the '{}' command"
DRYRUN_KEY = "This user has no permissions to access the '{}' key"
DRYRUN_CHANNEL = "This user has no permissions to access the '{}' channel"
ACL_MODIFIER = "ERR Error in ACL SETUSER modifier '{}': {}"
ACL_SYNTAX = "Syntax error"
ACL_UNKNOWN_COMMAND = "Unknown command or category name in ACL"
ACL_BAD_HASH = "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters"
ACL_NO_SUCH_PASSWORD = "The password you are trying to remove from the user does not exist"
ACL_AFTER_ALLKEYS = (
    "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. "
    "Try 'resetkeys' to start with an empty list of patterns"
)
ACL_AFTER_ALLCHANNELS = (
    "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. "
    "Try 'resetchannels' to start with an empty list of channels"
)
ACL_FIRST_ARG_OF_SUBCOMMAND = "Allowing first-arg of a subcommand is not supported"
ACL_USER_NOT_FOUND = "ERR User '{}' not found"
ACL_COMMAND_NOT_FOUND = "ERR Command '{}' not found"
ACL_DELETE_DEFAULT = "ERR The 'default' user cannot be removed"
ACL_UNKNOWN_CATEGORY = "ERR Unknown category '{}'"
ACL_BAD_USERNAME = "ERR Usernames can't contain spaces or null characters"
ACL_NO_FILE = (
    "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the "
    "ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) "
    "in order to store users in the Redis configuration."
)
ACL_FILE = "ERR Error loading ACLs, {}"
ACL_GENPASS_BITS = (
    "ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096"
)
ACL_SELECTORS = "ERR ACL selectors are not supported by March: grant keys and commands on the user itself"
# (March's own) a read-modify-write of one user lost its race too many times in a row: nothing was written
ACL_CHANGING = "TRYAGAIN user '{}' kept changing while this command applied to it; nothing was changed, try again"

# --- transactions ------------------------------------------------------------------------------
MULTI_NESTED = "ERR MULTI calls can not be nested"
EXEC_WITHOUT_MULTI = "ERR EXEC without MULTI"
DISCARD_WITHOUT_MULTI = "ERR DISCARD without MULTI"
EXECABORT = "EXECABORT Transaction discarded because of previous errors."
EXECABORT_BECAUSE = "EXECABORT Transaction discarded because of: {}"
NOT_IN_MULTI = "ERR Command not allowed inside a transaction"
# The one refused-command form (REFUSED, below), as every other refused command replies.
WATCH_UNSUPPORTED = (
    "ERR 'WATCH' is not supported by March: sequences never change except forwards, retry the transaction instead"
)

# --- limits ------------------------------------------------------------------------------------
MAX_CLIENTS = "ERR max number of clients reached"

# --- sequences ---------------------------------------------------------------------------------
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
REFUSED = "ERR '{}' is not supported by March: {}"
NO_SUCH_KEY = "ERR no such sequence '{}'"
KEY_EXISTS = "ERR sequence '{}' already exists"
AUTO_CREATE_OFF = "ERR no such sequence '{}' and auto_create is off: create it with SEQ.CREATE"
INCRBY_NOT_POSITIVE = "ERR increment must be a positive integer: sequences only move forwards"
INCRBY_TOO_LARGE = "ERR increment exceeds the maximum of {} IDs per request (max_incrby)"
SET_BACKWARDS = "ERR SET would move sequence '{}' backwards: IDs up to {} have already been handed out"
SET_NEGATIVE = "ERR a sequence floor must be a non-negative integer"
SET_OPTION = "ERR SET on a sequence takes only NX (no expiry, GET or XX: sequences never expire or go back)"
BATCH_RANGE = "ERR MINBATCH and MAXBATCH must satisfy 1 <= MINBATCH <= MAXBATCH <= {}"
START_RANGE = "ERR START must be between 1 and 9223372036854775807"
KEY_TOO_LONG = "ERR key too long: sequence names are at most {} bytes (max_key_len)"
MAX_SEQUENCES = "ERR max number of sequences reached: {} (max_sequences); sequences are never deleted"
REPLY_TOO_LARGE = "ERR the reply would pass max_output_buffer ({} bytes): narrow the pattern, or use SCAN"
MULTI_TOO_LONG = "ERR too many commands queued in this transaction: {} (max_multi_commands)"

# --- timestamp sequences -----------------------------------------------------------------------
TS_PRESET = "ERR unknown timestamp preset '{}' (snowflake, sonyflake, js53, custom)"
TS_BITS = "ERR a timestamp layout needs TIMEBITS >= 1, NODEBITS >= 0, SEQBITS >= 0 and at most 63 bits in all (got {})"
TS_ORDER = "ERR ORDER names time, node and seq once each, highest first, with time above seq (e.g. time,node,seq)"
TS_NODE = "ERR NODE {} does not fit the {}-bit node field (0..{})"
TS_EPOCH = "ERR EPOCH must be milliseconds since 1970-01-01, not negative"
TS_EPOCH_FUTURE = "ERR EPOCH {} is in the future (the clock says {})"
TS_UNIT = "ERR UNIT must be between 1 and 86400000 milliseconds"
TS_LOOKAHEAD = "ERR LOOKAHEAD must be between {} and {} milliseconds"
TS_EXHAUSTED = "ERR timestamp sequence '{}' has run out of time bits: its layout ends at {}"
TS_LAYOUT_ENDED = "ERR this layout has already run out of time bits: it ends at {}"
TS_FLOOR = "ERR {} is above every ID this layout can make for node {}"
TS_NOT_AN_ID = "ERR {} is not an ID of this layout: IDs are between 0 and {}"
DEBUG_DISABLED = (
    "ERR DEBUG command not allowed. Set enable_debug_command to yes in the configuration "
    "(it lets any client move the server's clock), and then restart the server."
)

# --- server-side ID features: timestamp lead cap, SEQ.ALTER, worker ids (WORKER.*) ---------------
TRYAGAIN_LEAD_CAP = (
    "TRYAGAIN timestamp sequence '{}' is at its lead cap: its IDs may not run more than {} ms ahead of real "
    "time (MAXLEAD), please retry"
)
LEAD_CAP_TOO_LARGE = (
    "ERR INCRBY {} can never fit timestamp sequence '{}': its lead cap (MAXLEAD {} ms) allows at most {} IDs "
    "in one request"
)
TS_MAXLEAD = "ERR MAXLEAD must be between {} and {} milliseconds"
ALTER_NOTHING = "ERR SEQ.ALTER needs at least one of MINBATCH, MAXBATCH, MAXLEAD"
ALTER_MAXLEAD_PLAIN = "WRONGTYPE MAXLEAD applies to timestamp sequences only; '{}' is a plain sequence"
ALTER_BATCH_TIMESTAMP = (
    "WRONGTYPE MINBATCH and MAXBATCH apply to plain sequences only; '{}' is a timestamp sequence (see MAXLEAD)"
)
# A stored record this version cannot read (written by an older version, or by hand): the key
# answers this, never an ID from guessed settings, until an admin repairs it (march.keyspace.keyspace).
SEQ_UNREADABLE = "ERR the stored settings of sequence '{}' cannot be read ({}): an admin repairs them with SEQ.ALTER"
SEQ_LAYOUT_UNREADABLE = (
    "ERR the stored layout of timestamp sequence '{}' cannot be read ({}): an admin gives it with SEQ.ALTER key "
    "PRESET name [TIMEBITS n] [NODEBITS n] [SEQBITS n] [ORDER f,f,f] [EPOCH ms] [UNIT ms] [NODE n]"
)
ALTER_LAYOUT = (
    "ERR SEQ.ALTER sets a layout only to repair a timestamp sequence whose stored layout cannot be read; '{}' has one"
)
WORKER_NAMESPACE = "ERR worker namespace must be 1 to {} bytes"
WORKER_TTL = "ERR worker TTL must be between 1 and 86400 seconds"
WORKER_ID = "ERR worker id must be an integer between 0 and 1023"
WORKER_UPTO = "ERR UPTO must be a non-negative integer (Unix milliseconds)"
WORKER_NONE_FREE = "ERR no free worker id in namespace '{}': {} are held or resting after expiry (worker_max_holders)"
WORKER_NAMESPACES = (
    "ERR max number of worker namespaces reached: {} (worker_max_namespaces); a namespace counts until its "
    "ids are released or expired"
)
WORKER_NOT_HELD = "ERR worker id {} in namespace '{}' is not held with this token: stop issuing IDs with it"
TRYAGAIN_WORKERS = "TRYAGAIN worker ids of namespace '{}' are changing, please retry"

# --- availability (retryable: the client did not get an ID) -------------------------------------
TRYAGAIN_STORE = "TRYAGAIN the durable ceiling for '{}' could not be extended in time, please retry"
TRYAGAIN_STORE_DOWN = "TRYAGAIN the store did not answer, please retry"
TRYAGAIN_STORE_FULL = (
    "TRYAGAIN the store is out of space (etcd NOSPACE alarm): no ceiling can be raised until an operator "
    "frees space, please retry later"
)
TRYAGAIN_LOADING_KEY = "TRYAGAIN the store did not answer in time for '{}', please retry"
STORE_REJECTED = "ERR the store refused the request: {}"
INTERNAL = "ERR internal error: {!r}"
TRYAGAIN_STARTING = "TRYAGAIN March is loading its state, please retry"
SHUTTING_DOWN = "TRYAGAIN March is shutting down, please retry on another node"
CLUSTERDOWN = "CLUSTERDOWN The cluster is down"
# A node cut off from etcd for longer than its lease lives (``march.cluster.directory``): what it last
# read of who leads may be stale, so it names nobody; a cluster client asks another node.
CLUSTERDOWN_CUT_OFF = "CLUSTERDOWN this node lost touch with etcd and knows no primary, please ask another node"
MOVED = "MOVED {} {}"
TRYAGAIN_NO_PRIMARY = "TRYAGAIN the primary is not registered yet, please retry"
TRYAGAIN_TAKING_OVER = "TRYAGAIN this node is taking over as primary, please retry"
CLUSTER_DISABLED = "ERR This instance has cluster support disabled"
FAILOVER_NOT_PRIMARY = "ERR FAILOVER is not valid when server is a replica."
FAILOVER_IN_PROGRESS = "ERR FAILOVER already in progress."
FAILOVER_TARGET_UNKNOWN = "ERR FAILOVER target HOST and PORT is not a replica."
FAILOVER_NO_STANDBY = "ERR FAILOVER requires connected replicas."
FAILOVER_NONE = "ERR No failover in progress."
FAILOVER_TIMEOUT_RANGE = "ERR FAILOVER timeout must be greater than 0"
FAILOVER_ABORT_ALONE = "ERR FAILOVER with ABORT takes no other option."
FAILOVER_ABORTED = "ERR FAILOVER aborted: this node is still the primary."
FAILOVER_LOST_LEADERSHIP = "ERR FAILOVER could not hand over: this node no longer held the leader key."
FAILOVER_TIMEOUT = "ERR FAILOVER timed out waiting for {} to take over; the cluster elects a primary by itself"
NOT_SERVING = "CLUSTERDOWN this node lost its right to hand out IDs, please retry"
# FAILOVER that cannot complete: the old primary stops waiting as soon as it knows (issue 20)
FAILOVER_TIMEOUT_TOO_LONG = "ERR FAILOVER timeout must be at most {} milliseconds"
FAILOVER_TARGET_GONE = (
    "ERR FAILOVER target {} stopped answering (its lease ended) before it took over; "
    "the cluster elects a primary by itself"
)
FAILOVER_OTHER_PRIMARY = "ERR FAILOVER target {} did not take over: {} holds the leader key now"

# Leadership groups (scale-out, issue 17)
FAILOVER_GROUP_RANGE = "ERR FAILOVER GROUP must be a group number from 0 to {}"
CLUSTER_FAILOVER_ON_PRIMARY = "ERR You should send CLUSTER FAILOVER to a replica"
CLUSTER_FAILOVER_NO_PRIMARY = "ERR I'm a replica but my master is unknown to me"
CLUSTER_FAILOVER_TIMEOUT = "ERR CLUSTER FAILOVER: group {} was not handed over in time (the request is withdrawn)"

# --- configuration: CONFIG SET / REWRITE / RESETSTAT -------------------------------------------
# Redis' own texts where Redis has one, so tools that parse them keep working.
CONFIG_SET_UNKNOWN = "ERR Unknown option or number of arguments for CONFIG SET - '{}'"
CONFIG_SET_DUPLICATE = "ERR CONFIG SET failed (possibly related to argument '{}') - duplicate parameter"
CONFIG_SET_INVALID = "ERR CONFIG SET failed (possibly related to argument '{}') - {}"
CONFIG_SET_RESTART = (
    "ERR CONFIG SET failed (possibly related to argument '{}') - can't set immutable config: it needs a restart, "
    "{} (change it in the config file and restart)"
)
CONFIG_NO_FILE = "ERR The server is running without a config file"
CONFIG_NOT_UTF8 = "the value is not valid UTF-8"
# what CONFIG SET says of a value that is not of its option's type at all (Redis' config.c)
CONFIG_NOT_INTEGER = "argument couldn't be parsed into an integer"
CONFIG_NOT_YES_NO = "argument must be 'yes' or 'no'"
CONFIG_NOT_NUMBER = "argument couldn't be parsed into a number"
CONFIG_REWRITE_FAILED = "ERR Rewriting config file: {}"
# Why an option needs a restart (the text after "it needs a restart, "); config.OPTIONS gives each its reason.
RESTART_LISTEN = "the listening sockets are opened at start"
RESTART_TLS = "the TLS context (certificates, client checks) is built when the TLS port opens at start"
RESTART_STORE = "the store is opened at start"
RESTART_ACLFILE = "the users are seeded from it at start; ACL LOAD and ACL SAVE keep using the file named at start"
RESTART_METRICS = "the metrics endpoint is opened at start"
RESTART_DEBUG = "DEBUG can only be allowed at start, on purpose: it lets any client move the clock IDs read"
RESTART_CLUSTER = "cluster membership (etcd, prefix, node id, address, lease) is fixed when the node joins"
RESTART_ETCD = "the etcd connections are opened, with these credentials, at start"
RESTART_AT_START = "it is read once, at start"
CONFIG_SET_PERSISTENCE = (
    "ERR CONFIG SET failed (possibly related to argument '{}') - can't set immutable config: March has no snapshots "
    "or AOF to tune, every ceiling is durable before an ID under it is handed out"
)

# Why each refused command is refused; the text follows ``REFUSED``.
REFUSAL_REASONS: dict[str, str] = {
    "decr": "a sequence never goes backwards (a lower ID could repeat one already handed out)",
    "decrby": "a sequence never goes backwards (a lower ID could repeat one already handed out)",
    "incrbyfloat": "IDs are integers",
    "del": "deleting a sequence would let its IDs be handed out again",
    "unlink": "deleting a sequence would let its IDs be handed out again",
    "expire": "a sequence never expires (its IDs would be handed out again)",
    "pexpire": "a sequence never expires (its IDs would be handed out again)",
    "expireat": "a sequence never expires (its IDs would be handed out again)",
    "pexpireat": "a sequence never expires (its IDs would be handed out again)",
    "append": "a sequence holds an integer, not a string",
    "setrange": "a sequence holds an integer, not a string",
    "getset": "setting a value could move a sequence backwards; use SET key N to raise its floor",
    "getdel": "deleting a sequence would let its IDs be handed out again",
    "getex": "a sequence never expires (its IDs would be handed out again)",
    "rename": "renaming would let the old name start again at 1",
    "renamenx": "renaming would let the old name start again at 1",
    "move": "March has one database",
    "copy": "two sequences with the same IDs would hand out duplicates",
    "flushdb": "flushing would let every ID be handed out again",
    "flushall": "flushing would let every ID be handed out again",
    "setex": "a sequence never expires (its IDs would be handed out again)",
    "psetex": "a sequence never expires (its IDs would be handed out again)",
    "mset": "use SET key N per sequence, which checks that it moves forwards",
    "msetnx": "use SET key N NX per sequence",
    "setnx": "use SET key N NX",
    "persist": "a sequence never expires",
}


# --- observability: SLOWLOG, MONITOR, LATENCY (Redis' own texts) ---------------------------------
SLOWLOG_COUNT = "ERR count should be greater than or equal to -1"
SUBCOMMAND_SYNTAX = "ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP."
MONITOR_DENIED = "ERR MONITOR isn't allowed for DENY BLOCKING client"

# --- Redis' own rules: transactions, MONITOR connections, CLIENT KILL / LIST (Redis 7.0's texts) --
WATCH_IN_MULTI = "ERR WATCH inside MULTI is not allowed"
MONITOR_KEYSPACE = "ERR Replica can't interact with the keyspace"  # what Redis answers a MONITOR connection
CLIENT_TYPE = "ERR Unknown client type '{}'"
CLIENT_NO_SUCH_USER = "ERR No such user '{}'"
CLIENT_LIST_ID = "ERR Invalid client ID"
CLIENT_LIST_TOO_LARGE = (
    "ERR the reply would pass max_output_buffer ({} bytes): narrow it with CLIENT LIST ID id... or TYPE type"
)

# --- Sentinel discovery (Redis Sentinel 7.0's texts) ------------------------------------------------
NO_SUCH_MASTER = "ERR No such master with that name"

# --- pub/sub (+switch-master for Sentinel clients; march.cluster.announce) -------------------------------------
PUBSUB_CONTEXT = (  # Redis 7.0's text, for a RESP2 connection with subscriptions
    "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
)
TOO_MANY_SUBSCRIPTIONS = "ERR too many subscriptions on this connection (at most {})"
SUBSCRIPTION_NAME_TOO_LONG = "ERR channel or pattern name too long (at most {} bytes)"
SUBSCRIPTION_BYTES = "ERR too many subscription bytes on this connection (names of at most {} bytes together)"


# --- forwarding (redirect forward: march.cluster.links, commands.forward) -------------------------------------
# A forwarded request whose reply was lost may have run there: a plain ERR, which no client retries
# on its own (TRYAGAIN would invite an automatic retry); a retry by the application is still safe.
FORWARD_LOST = (
    "ERR the link to the primary broke before the reply: the request may have run there "
    "(an ID it took is skipped, never repeated)"
)
FORWARD_TIMEOUT = (
    "ERR the primary did not answer the forwarded request in time: it may have run there "
    "(an ID it took is skipped, never repeated)"
)
# never sent: it did not run
FORWARD_UNREACHABLE = "TRYAGAIN the primary cannot be reached from this node, please retry"
FORWARD_MOVED = "TRYAGAIN the primary changed while the request was forwarded (it did not run), please retry"
FORWARD_CROSS = (
    "EXECABORT Transaction discarded because its commands belong to different primaries "
    "(a forwarded transaction runs on one primary)"
)
LINK_PROOF_BAD = WRONGPASS  # a wrong HMAC gets AUTH's answer: nothing about what was wrong
LINK_THROTTLED = AUTH_THROTTLED
LINK_NEEDS_TLS = "ERR this node takes forwarding links over TLS only (tls_cluster_required)"


def wrong_arity(name: str) -> CommandError:
    return CommandError(WRONG_ARITY.format(name.lower()))


def unknown_command(args: list[bytes]) -> CommandError:
    name = args[0].decode("utf-8", "replace")[:128]
    rest = ""
    for a in args[1:]:  # Redis quotes each argument with a trailing space, up to 128 characters
        if len(rest) >= 128:
            break
        rest += f"'{a.decode('utf-8', 'replace')[: 128 - len(rest)]}' "
    return Rejected(UNKNOWN_COMMAND.format(name, rest))


# --- the argument parser (commands.args) and container tables: Redis 7.0's texts --------------------
NOT_FLOAT = "ERR value is not a valid float"
# Scale-out keyspace commands (helper "layout"): a multi-key request across leadership groups, as Redis
# Cluster answers keys of different slots (cluster.c, clusterRedirectClient)
CROSSSLOT = "CROSSSLOT Keys in request don't hash to the same slot"
