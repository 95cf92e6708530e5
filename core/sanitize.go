package core

import "github.com/silas-gateway/silas/cards"

// Sanitize replaces what PostgreSQL cannot store (NUL, invalid UTF-8)
// in every text field of the turn by U+FFFD and lists the fields it changed in
// t.Sanitized, so the turn is stored (and answered) instead of failing at
// the database and being retried forever. The replacement is
// deterministic, so a redelivered event keeps its event id.
func (t *Turn) Sanitize() {
	t.Sanitized = nil
	fields := []struct {
		name string
		s    *string
	}{
		{"text", &t.Text}, {"sender_name", &t.SenderName}, {"event_id", &t.EventID},
		{"platform_message_id", &t.PlatformMessageID}, {"chat_kind", &t.ChatKind}, {"auth_method", &t.Evidence.Method},
		{"tap_handle", &t.TapHandle},
	}
	for _, f := range fields {
		if clean, changed := StorableText(*f.s); changed {
			*f.s = clean
			t.Sanitized = append(t.Sanitized, f.name)
		}
	}
	ids := []struct {
		name string
		s    string
		set  func(string)
	}{
		{"channel", string(t.Channel), func(v string) { t.Channel = ChannelName(v) }},
		{"conversation", string(t.Conversation), func(v string) { t.Conversation = ConversationID(v) }},
		{"sender", string(t.Sender), func(v string) { t.Sender = IdentityID(v) }},
	}
	for _, f := range ids {
		if clean, changed := StorableText(f.s); changed {
			f.set(clean)
			t.Sanitized = append(t.Sanitized, f.name)
		}
	}
	if t.Tap != nil {
		tap := *t.Tap
		card, c1 := StorableText(string(tap.Card))
		choice, c2 := StorableText(tap.Choice)
		if c1 || c2 {
			tap.Card, tap.Choice = cards.ID(card), choice
			t.Tap = &tap
			t.Sanitized = append(t.Sanitized, "tap")
		}
	}
}
