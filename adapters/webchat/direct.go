package webchat

import "github.com/silas-gateway/silas/core"

var _ core.DirectMessenger = (*Adapter)(nil)

// DirectConversation implements core.DirectMessenger: the web chat has one
// conversation, its configured identity's, readable by the browser that
// logs in (also later: it is shown from storage). So an outside agent's
// card (core/callgate) reaches a web-chat owner who has not written yet.
func (a *Adapter) DirectConversation(id core.IdentityID) (core.ConversationID, bool) {
	if id != a.cfg.Identity {
		return "", false
	}
	return a.conv, true
}
