# Cython declarations for march/resp.py (docs/compiled.md): the parser as a C-level class. Types
# only; the code is march/resp.py, which also runs as it is when not compiled.
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.long cimport PyLong_AsLongLongAndOverflow


cdef class ExactParser:
    cdef public object _args
    cdef public Py_ssize_t _left
    cdef public Py_ssize_t _blen
    cdef public bytearray _part
    cdef public Py_ssize_t _held
    cdef public object _inline
    cdef public Py_ssize_t _seen
    cdef public bint _strict
    cdef public bint _auth_seen
    cdef public str _provisional
    cdef public bint _slow
    cdef public Py_ssize_t _max_args
    cdef public Py_ssize_t _max_bulk
    cdef public Py_ssize_t _max_inline
    cdef public Py_ssize_t _max_held
    cdef public Py_ssize_t held

    cpdef object feed(self, data)
    cpdef _set_slow(self)
    @cython.locals(pos=Py_ssize_t, n=Py_ssize_t, old=Py_ssize_t, nl=Py_ssize_t, stop=Py_ssize_t)
    cpdef _parse(self, data, list requests, bint handoff)
    @cython.locals(left=Py_ssize_t, blen=Py_ssize_t, strict=bint, nl=Py_ssize_t, args=list)
    cpdef Py_ssize_t _advance(self, buf, Py_ssize_t pos, Py_ssize_t end, list requests) except? -1
    cpdef _check_held(self)
    @cython.locals(n=Py_ssize_t, max_inline=Py_ssize_t, nl=Py_ssize_t)
    cpdef Py_ssize_t _inline_lines(self, data, Py_ssize_t pos, list requests) except? -1
    cpdef _inline_request(self, line, list requests)


cdef class RequestParser(ExactParser):
    cdef public object _last_data
    cdef public object _last_req
    cdef public Py_ssize_t _pending
    cdef public object _reader
    cdef public object _ridx
    cdef public object _source
    cdef public object _type0

    @cython.locals(requests=list, plain=bint)
    cpdef object feed(self, data)
    cpdef bint _at_boundary(self) except -1
    cpdef bytes _take_over(self)
    cpdef _feed_exact(self, data, list requests)
    cpdef discard(self)


@cython.locals(requests=list, n=Py_ssize_t, pos=Py_ssize_t, compiled=bint, last=list, same=bytes, start=Py_ssize_t,
               count=Py_ssize_t, k=Py_ssize_t, args=list, digits=Py_ssize_t, length=Py_ssize_t, end=Py_ssize_t)
cpdef list _whole_requests(bytes data, Py_ssize_t max_args, Py_ssize_t max_bulk)


@cython.locals(digits=bytearray, width=Py_ssize_t, out=bytearray, at=Py_ssize_t, _i=Py_ssize_t, j=Py_ssize_t)
cpdef bytes _integer_run(first, Py_ssize_t count)


cpdef bytes integer_reply(value)


# The C helpers resp.py calls where it runs compiled (``_COMPILED``); interpreted, the same lines take
# their Python spelling. Each makes one bytes object from C memory, without a Python object per piece.

cdef inline bytes _c_slice(bytes data, Py_ssize_t start, Py_ssize_t end):
    """``data[start:end]`` for 0 <= start <= end <= len(data) (the caller's bounds): one copy, no slice object."""
    return PyBytes_FromStringAndSize(PyBytes_AS_STRING(data) + start, end - start)


cdef inline bytes _c_integer(object value):
    """``b":%d\\r\\n" % value`` for an int: its digits written backwards into a C buffer."""
    cdef int overflow = 0
    cdef long long v = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow:
        return b":%d\r\n" % value
    cdef char buf[24]  # `:`, a sign, at most 20 digits (2**64 has 20), CRLF
    cdef Py_ssize_t at = 21
    cdef unsigned long long u = (0ULL - <unsigned long long>v) if v < 0 else <unsigned long long>v
    buf[22] = 13
    buf[23] = 10
    while True:
        buf[at] = <char>(48 + u % 10)
        u //= 10
        if u == 0:
            break
        at -= 1
    if v < 0:
        at -= 1
        buf[at] = 45  # `-`
    at -= 1
    buf[at] = 58  # `:`
    return PyBytes_FromStringAndSize(buf + at, 24 - at)
