package bench

import "github.com/smcloop/smcloop/internal/sockopt"

// tcpCork sets or clears TCP_CORK on a TCP connection, as nginx does around sendfile with
// tcp_nopush on.
var tcpCork = sockopt.SetCork
