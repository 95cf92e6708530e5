package route_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/route"
)

type store struct{ direct []core.DirectConversation }

func (s store) DirectConversations(context.Context, []core.IdentityID, core.ChannelName) ([]core.DirectConversation, error) {
	return s.direct, nil
}
func (store) SpokeIn(context.Context, core.ConversationID, []core.IdentityID) (bool, error) {
	return false, nil
}

// A copy never goes to a channel that is deaf now (its tap could not
// arrive); when every approver's channel is deaf the request is refused at
// once with that reason (issue 28: "all channels down").
func TestPlanSkipsDeafChannels(t *testing.T) {
	t.Parallel()
	a := core.ApprovalRequest{ID: "a1", Channel: "slack", Conversation: "slack:C1", Requester: "slack:U2", Risk: cards.RiskHigh,
		Approvers: []string{"role:owner"}}
	direct := []core.DirectConversation{{Channel: "telegram", Conversation: "telegram:1", Identity: "telegram:1"},
		{Channel: "discord", Conversation: "discord:9", Identity: "telegram:1"}}
	owners := func(context.Context) []core.IdentityID { return []core.IdentityID{"telegram:1"} }
	deafOn := func(chans ...core.ChannelName) func(context.Context) (map[core.ChannelName]time.Time, error) {
		return func(context.Context) (map[core.ChannelName]time.Time, error) {
			m := map[core.ChannelName]time.Time{}
			for _, c := range chans {
				m[c] = time.Now()
			}
			return m, nil
		}
	}
	tests := []struct {
		name    string
		deaf    []core.ChannelName
		where   string
		refused string
	}{
		{name: "none deaf", where: "telegram, discord"},
		{name: "one deaf", deaf: []core.ChannelName{"discord"}, where: "telegram"},
		{name: "all deaf", deaf: []core.ChannelName{"telegram", "discord"}, refused: "use only channels that are deaf now (telegram, discord"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rt, err := route.New(route.Config{Store: store{direct}, Owners: owners, Channels: []core.ChannelName{"slack", "telegram", "discord"},
				Deaf: deafOn(tt.deaf...)})
			if err != nil {
				t.Fatal(err)
			}
			p, err := rt.Plan(context.Background(), a, core.TrustAuth)
			if err != nil {
				t.Fatal(err)
			}
			if tt.refused != "" {
				if p.Routed || !strings.Contains(p.Refused, tt.refused) {
					t.Fatalf("plan %+v, want refused: %s", p, tt.refused)
				}
				return
			}
			if !p.Routed || p.Where() != tt.where || p.Refused != "" {
				t.Fatalf("plan %+v (where %q), want routed to %s", p, p.Where(), tt.where)
			}
		})
	}
}
