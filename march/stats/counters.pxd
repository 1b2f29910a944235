# Cython declarations for march/stats/counters.py (docs/compiled.md): a command's counters as a
# C-level class, so that the per-read accounting (march/transport/timing.py) bumps them as C fields.
# Types only; the code is march/stats/counters.py, which also runs as it is when not compiled.


cdef class CommandStats:
    cdef public object _base
    cdef public dict errors
    cdef public list hist
    cdef public str name
    cdef public long long rejected
    cdef public list skipped
    cdef public long long skipped_ns
    cdef public object subs
    cdef public long long total_ns
    cdef public long long waits
