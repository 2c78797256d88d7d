"""The wire's message kinds, the limits its integers keep and the reasons a message is refused.

The layout of each kind and the checks it gets: :mod:`gale.worker.wire`. Both the checking reader
there and the compiled reader (:mod:`gale.worker.wire_fast`) read these, and so do the writers
(:mod:`gale.worker.outbox`, :mod:`gale.worker.loads`).
"""

from gale.worker.runtime.acker import ACK, ACKED, FAIL, FAILED, INIT, RESET, RESET_TIMEOUT


TUPLE, ACKER, RESULT = 0, 1, 2
TUPLES, ACKERS, RESULTS = 3, 4, 5
LOADS = 6
#: control messages for spout tasks (exactly-once epochs and the sources' reports), four unsigned
#: 64-bit integers each; they travel with the acker's verdicts, to the same tasks
CONTROLS = 7
#: a bolt worker's acks for one acker task, packed: bins of whole :data:`ACK_PACK_BYTES` acks, each
#: a root and an ack value as little-endian unsigned 64-bit integers (one bin per ack buffer flush)
ACK_PACKS = 8
ACK_PACK_BYTES = 16
KINDS = (TUPLE, ACKER, RESULT, TUPLES, ACKERS, RESULTS, CONTROLS, ACK_PACKS)
#: a grouped kind → how many list elements make one of its messages (an ACK_PACKS bin: one or more)
GROUP_WIDTH = {TUPLES: 1, ACKERS: 4, RESULTS: 2, CONTROLS: 4, ACK_PACKS: 1}
#: message kind → the task role that takes it (TUPLE, ACKER or RESULT)
ROLE_OF = {TUPLE: TUPLE, ACKER: ACKER, RESULT: RESULT, TUPLES: TUPLE, ACKERS: ACKER, RESULTS: RESULT,
           CONTROLS: RESULT, ACK_PACKS: ACKER}
MAX_U64 = (1 << 64) - 1
MIN_I64 = -(1 << 63)
MAX_TASK = (1 << 31) - 1
#: a LOADS report's figures are per mille
LOAD_SCALE = 1000
ACKER_KINDS = frozenset((INIT, ACK, FAIL, RESET))
OUTCOMES = frozenset((ACKED, FAILED, RESET_TIMEOUT))

#: message rejection reasons (counted per reason by the transfer)
UNKNOWN_KIND = "unknown_kind"      # the first element is not a message kind
UNKNOWN_TASK = "unknown_task"      # not a task of this worker, or one that takes another kind of message
MALFORMED = "malformed"            # wrong length, a field of the wrong type, a tuple with the wrong field count
OUT_OF_RANGE = "out_of_range"      # root / edge id / ack value outside unsigned 64 bits, bad spout task
UNKNOWN_STREAM = "unknown_stream"  # a component/stream the topology does not declare
NOT_SUBSCRIBED = "not_subscribed"  # a declared stream the receiving task's component does not subscribe to
UNDECODABLE = "undecodable"        # the payload is not msgpack from this point on
NOT_A_SPOUT = "not_a_spout_task"   # an INIT whose spout task is no spout task of the topology (its verdict would go there)
INVALID_REASONS = (UNKNOWN_KIND, UNKNOWN_TASK, MALFORMED, OUT_OF_RANGE, UNKNOWN_STREAM, NOT_SUBSCRIBED, UNDECODABLE,
                   NOT_A_SPOUT)
