// Package verbstest is an in-memory RDMA fabric implementing the verbs interfaces, for
// fast tests of SMC-R's protocol logic: two or more fake hosts in one process, each with
// one device and one port with RoCE v2 GIDs, as rxe has.
//
// What it models: the RC queue pair state machine (RESET → INIT → RTR → RTS, Err from
// anywhere; posting in the wrong state fails with EINVAL, posting in Err flushes);
// RDMA WRITE copying into the target region's memory after checking the rkey, the
// region's domain, its address range and its remote-write access (a violation completes
// with StatusRemAccessErr and moves both queue pairs to Err, as an RC responder's NAK
// does); SEND matched to the oldest posted RECV, with receiver-not-ready behaviour (with
// RNR retry 7 the SEND, and everything the same peer sends after it, waits for a RECV;
// with a finite count it fails with StatusRNRRetryExcErr); signaled and unsignaled
// completions; send-queue and CQ limits; arming of a CQ (solicited-only included) and
// its event on the completion channel, which a goroutine waits on with a deadline, like
// the real channel's descriptor on the poller.
//
// Work is done when it is posted, under the fabric's one lock: where real hardware
// takes time (a retry timeout before StatusRetryExcErr), the fake answers at once.
//
// Faults, per host: [Host.FailQP] (a queue pair to Err, its work flushed), [Host.DropCompletions]
// (lost completions), [Host.DelayCompletions] / [Host.ReleaseCompletions] (late
// completions, order kept), [Host.Kill] (peer death: the host leaves the fabric and a
// peer's next work request fails with StatusRetryExcErr), [Host.SetPortState].
// [Host.Live] counts open objects, for leak checks.
package verbstest
