# Cython declarations for march/transport/connection.py (docs/compiled.md). Types only; the code is
# march/transport/connection.py.
cimport cython

from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from march.client cimport Client
from march.resp cimport integer_reply
from march.transport.flow cimport Backpressure, Intake
from march.transport.timing cimport RequestTimer


cdef class Connection:
    cdef public object app
    cdef public object peers
    cdef public object tls
    cdef public bint forwarding
    cdef public bint admitted
    cdef public object transport
    cdef public Client client
    cdef public Backpressure flow
    cdef public RequestTimer timer
    cdef public object feed
    cdef public Intake intake
    cdef public bint deaf
    cdef public bint busy
    cdef public object waiting
    cdef public list backlog
    cdef public bint closing
    cdef public bint plain
    cdef public object lanes
    cdef public dict monitors
    cdef public object stats

    @cython.locals(began=cython.longlong)
    cpdef data_received(self, data)
    cpdef dict table(self)
    @cython.locals(out=list, n=Py_ssize_t, i=Py_ssize_t, alike=Py_ssize_t, stall=bint, args=list, turn=Py_ssize_t,
                   hot=dict, client=Client, now=cython.longlong)
    cpdef run(self, requests, Py_ssize_t start, Py_ssize_t same_until=*, list out=*, long long began=*)
    cpdef answered(self, list args, ids, list out)
    cpdef dict called(self, result)
    cpdef settle(self)
    cpdef next_turn(self, requests, Py_ssize_t i, Py_ssize_t same_until, list out)
    @cython.locals(client=Client)
    cpdef read_done(self, requests, Py_ssize_t i, Py_ssize_t same_until, list out, bint stall)


# connection.py calls this where it runs compiled on Linux (``_C_CLOCK``): ``time.monotonic_ns()`` without
# a Python call (CPython reads the same clock there).
cdef inline long long _c_clock_ns() noexcept:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <long long>ts.tv_sec * 1000000000 + ts.tv_nsec
