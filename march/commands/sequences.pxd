# Cython declarations for march/commands/sequences.py (docs/compiled.md): the INCR handlers' step
# that hands out IDs takes a C-typed generator, so that its fast path (``take``) is a direct C call.
# Types only; the code is march/commands/sequences.py, which also runs as it is when not compiled.
from march.generators.bound cimport DurableBound


cpdef _hand_out(DurableBound gen, n)
