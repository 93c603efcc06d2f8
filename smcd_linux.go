package smcloop

// smcdAvailable reports whether SMC-D can work in this build: its DMBs are sealed
// memfds, its doorbells eventfds and its attach protocol passes fds over unix sockets,
// all of them Linux's.
const smcdAvailable = true
