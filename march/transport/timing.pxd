# Cython declarations for march/transport/timing.py (docs/compiled.md). Types only; the code is march/transport/timing.py.
cimport cython


cdef class RequestTimer:
    cdef public object client
    cdef public object commands
    cdef public dict spellings
    cdef public object slowlog
    cdef public object latency
    cdef public object limits

    @cython.locals(count=Py_ssize_t)
    cpdef read(self, requests, Py_ssize_t start, Py_ssize_t end, ns, Py_ssize_t alike, skipped)
    cpdef mixed(self, requests, Py_ssize_t start, Py_ssize_t end, ns, skipped)
    cpdef waited(self, args, took, bint throttled, bint skipped=*)
    cpdef slow(self, args, ns)
