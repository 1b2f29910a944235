# Cython declarations for march/transport/timing.py (docs/compiled.md). Types only; the code is march/transport/timing.py.
cimport cython

from march.stats.counters cimport CommandStats


@cython.locals(bits=Py_ssize_t)
cdef Py_ssize_t _bits(long long n)


cdef class RequestTimer:
    cdef public object client
    cdef public object commands
    cdef public dict spellings
    cdef public object slowlog
    cdef public object latency
    cdef public object limits
    cdef public object _config
    cdef public long long _slower
    cdef public bytes _name
    cdef public CommandStats _stats
    cdef public CommandStats _cmd

    @cython.locals(count=Py_ssize_t, stats=CommandStats, share=cython.longlong, name=object)
    cpdef read(self, requests, Py_ssize_t start, Py_ssize_t end, long long ns, Py_ssize_t alike, skipped)
    @cython.locals(stats=CommandStats, found=CommandStats, top=CommandStats, count=Py_ssize_t, same=Py_ssize_t,
                   share=cython.longlong, slot=Py_ssize_t, k=Py_ssize_t)
    cpdef mixed(self, requests, Py_ssize_t start, Py_ssize_t end, long long ns, skipped)
    @cython.locals(stats=CommandStats)
    cpdef waited(self, args, took, bint throttled, bint skipped=*)
    cpdef slow(self, args, ns)
