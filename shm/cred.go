package shm

// Cred is the process at the other end of a unix socket, as SO_PEERCRED
// reports it (struct ucred): its credentials when it connected, or when it
// called listen.
type Cred struct {
	Pid int32
	Uid uint32
	Gid uint32
}
