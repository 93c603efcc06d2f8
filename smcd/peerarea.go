package smcd

import "github.com/smcloop/smcloop/cdc"

// PeerArea is the CDC area of the peer's DMB, where this side publishes its producer
// and consumer words (for introspection: `smcloop ss` shows the cursors published).
func (l *Link) PeerArea() cdc.Area { return l.txA }
