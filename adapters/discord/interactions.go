package discord

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core"
)

// Interactions (slash commands and button taps) must be answered within
// 3 s, once. The first answer goes through respond: as the HTTP response
// in http mode, as POST /interactions/{id}/{token}/callback over the
// gateway. Later words to the tapper are follow-up messages
// (POST /webhooks/{app}/{token}, ephemeral).
//
// A tap is answered the Discord way, by the core's one answer (AnswerTap,
// delivered by the conversation's outbox lane with the card's new state):
// the tapped message itself shows the card's new state (response type 7,
// UPDATE_MESSAGE) and the notice goes to the tapper alone as a follow-up;
// a refusal that leaves the card as it was is the ephemeral answer itself
// (type 4 with flags 64). Discord's 3 s are the platform's, not the
// core's: a tap the answer has not reached by answerBy is acknowledged
// with a deferred update (type 6), and the answer then edits the card as
// the bot and sends the notice as a follow-up through the interaction's
// token, which travels with the stored tap (core.Turn.TapHandle) — so an
// answer after a restart still reaches the tapper, or fails cleanly once
// the token expired (15 minutes).

// maxInteractionBody bounds a POSTed interaction.
const maxInteractionBody = 1 << 20

// pendingIx is an interaction whose first answer (within Discord's 3 s)
// is still owed.
type pendingIx struct {
	ix  *discordgo.Interaction
	ref core.MessageRef // the tapped message; "" for commands
	// http receives the first answer in http mode (buffered, 1).
	http chan *discordgo.InteractionResponse

	mu        sync.Mutex
	responded bool
}

// interactions are the taps within their first 3 s, by event id: the
// window in which the core's answer can still be the interaction's
// response. The deadline removes each.
type interactions struct {
	mu      sync.Mutex
	byEvent map[string]*pendingIx
}

func newInteractions() *interactions {
	return &interactions{byEvent: map[string]*pendingIx{}}
}

// add registers p unless a tap with the same event id is pending (a
// redelivery: the first one's answer answers it).
func (x *interactions) add(ev string, p *pendingIx) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.byEvent[ev]; ok {
		return false
	}
	x.byEvent[ev] = p
	return true
}

func (x *interactions) remove(ev string, p *pendingIx) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.byEvent[ev] == p {
		delete(x.byEvent, ev)
	}
}

func (x *interactions) take(ev string) (*pendingIx, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	p, ok := x.byEvent[ev]
	delete(x.byEvent, ev)
	return p, ok
}

// ixHandle is an interaction as core.Turn.TapHandle carries it: what a
// follow-up needs.
type ixHandle struct {
	ID    string `json:"i"`
	AppID string `json:"a"`
	Token string `json:"t"`
}

func encodeIx(ix *discordgo.Interaction) string {
	b, _ := json.Marshal(ixHandle{ID: ix.ID, AppID: ix.AppID, Token: ix.Token})
	return string(b)
}

// decodeIx reads what encodeIx wrote; false for a typed tap (no handle)
// or one that is not an interaction's.
func decodeIx(s string) (*discordgo.Interaction, bool) {
	var h ixHandle
	if s == "" || json.Unmarshal([]byte(s), &h) != nil || !snowflakeRe.MatchString(h.ID) || h.Token == "" {
		return nil, false
	}
	return &discordgo.Interaction{ID: h.ID, AppID: h.AppID, Token: h.Token, Type: discordgo.InteractionMessageComponent}, true
}

// answerTyped answers a typed tap with a message in its channel (nothing
// when there is nothing to say).
func (a *Adapter) answerTyped(ctx context.Context, channel, text string) error {
	if strings.TrimSpace(text) == "" {
		return nil
	}
	_, err := a.sendRendered(ctx, channel, rendered{content: cutRunes(escapeMarkdown(text), MaxMessageLen)})
	return err
}

// respond sends the first answer to an interaction. p.mu is held.
func (a *Adapter) respondLocked(ctx context.Context, p *pendingIx, resp *discordgo.InteractionResponse) error {
	if p.responded {
		return errors.New("discord: interaction already answered")
	}
	if resp.Data != nil && resp.Data.AllowedMentions == nil {
		resp.Data.AllowedMentions = noMentions()
	}
	if p.http != nil {
		select {
		case p.http <- resp:
			p.responded = true
			return nil
		default:
			return errors.New("discord: interaction already answered")
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := a.rest.InteractionRespond(p.ix, resp, discordgo.WithContext(cctx)); err != nil {
		return mapError("interaction callback", err)
	}
	p.responded = true
	return nil
}

func ephemeralText(text string) *discordgo.InteractionResponse {
	return &discordgo.InteractionResponse{Type: discordgo.InteractionResponseChannelMessageWithSource,
		Data: &discordgo.InteractionResponseData{Content: cutRunes(escapeMarkdown(text), MaxMessageLen), Flags: ephemeral, AllowedMentions: noMentions()}}
}

// followUp shows text to the tapper alone, after the first answer. An
// interaction whose token expired (15 minutes) cannot be followed up: the
// notice is lost, logged, and the answer is not retried for it.
func (a *Adapter) followUp(ctx context.Context, ix *discordgo.Interaction, text string) {
	if strings.TrimSpace(text) == "" {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := a.rest.FollowupMessageCreate(ix, false, &discordgo.WebhookParams{Content: cutRunes(escapeMarkdown(text), MaxMessageLen),
		Flags: ephemeral, AllowedMentions: noMentions()}, discordgo.WithContext(cctx))
	if err != nil {
		a.log.Warn("discord: could not send a follow-up to a tap", slog.Any("err", mapError("follow-up", err)))
	}
}

// deadline acknowledges a tap the core's answer has not reached in time
// with a deferred update (type 6); the answer then edits and follows up.
func (a *Adapter) deadline(ev string, p *pendingIx) {
	a.ixs.remove(ev, p)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.responded {
		return
	}
	if err := a.respondLocked(context.Background(), p, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredMessageUpdate}); err != nil {
		a.log.Warn("discord: could not acknowledge a tap", slog.Any("err", err))
	}
}

// AnswerTap implements core.TapAnswerer (see the comment at the top). A
// tap typed as text has no interaction: the card is edited and the notice
// is a message in its channel.
func (a *Adapter) AnswerTap(ctx context.Context, ans core.TapAnswer) error {
	ix, ok := decodeIx(ans.Handle)
	if !ok {
		if ans.Card != nil {
			if err := a.Update(ctx, ans.Ref, core.OutMessage{Conversation: ans.Conversation, Card: ans.Card}); err != nil {
				return err
			}
		}
		ch, err := a.channelOf(ans.Conversation)
		if err != nil {
			return err
		}
		return a.answerTyped(ctx, ch, ans.Text)
	}
	var r rendered
	if ans.Card != nil {
		var err error
		if r, err = renderCard(ans.Card); err != nil {
			return kit.Permanentf("discord: %w", err)
		}
	}
	if p, ok := a.ixs.take(ans.EventID); ok && a.answerWithin(ctx, p, ans, r) {
		return nil
	}
	// Acknowledged already (deferred at its deadline), or this process did
	// not receive the tap (a restart): the card as an edit, the notice as a
	// follow-up.
	if ans.Card != nil {
		if err := a.Update(ctx, ans.Ref, core.OutMessage{Conversation: ans.Conversation, Card: ans.Card}); err != nil {
			return err
		}
	}
	a.followUp(ctx, ix, ans.Text)
	return nil
}

// answerWithin answers a tap within its 3 s, as the interaction's
// response; false when it was acknowledged already (or the response
// failed) and the answer must take the long way.
func (a *Adapter) answerWithin(ctx context.Context, p *pendingIx, ans core.TapAnswer, r rendered) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.responded {
		return false
	}
	switch {
	case ans.Card != nil && p.ref == a.moved.Resolve(ans.Ref) && !(ans.Refused != "" && a.unchanged(p.ref, r)):
		if err := a.respondLocked(ctx, p, updateResponse(r)); err != nil {
			a.log.Debug("discord: could not update through the tap; editing instead", slog.Any("err", err))
			return false
		}
		a.remember(p.ref, r)
		a.followUp(ctx, p.ix, ans.Text)
		return true
	case ans.Card != nil && !(ans.Refused != "" && a.unchanged(p.ref, r)):
		return false // not the tapped message: edited as the bot
	case strings.TrimSpace(ans.Text) != "":
		// A refusal that leaves the card as it was: the notice is the answer.
		return a.respondLocked(ctx, p, ephemeralText(ans.Text)) == nil
	default:
		return a.respondLocked(ctx, p, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredMessageUpdate}) == nil
	}
}

func updateResponse(r rendered) *discordgo.InteractionResponse {
	return &discordgo.InteractionResponse{Type: discordgo.InteractionResponseUpdateMessage,
		Data: &discordgo.InteractionResponseData{Content: r.content, Embeds: r.embeds, Components: r.components, AllowedMentions: noMentions()}}
}

// remember records what a message shows, so that an update that changes
// nothing can be told apart.
func (a *Adapter) remember(ref core.MessageRef, r rendered) {
	h := renderedHash(r)
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.shown) > 10000 {
		clear(a.shown)
	}
	a.shown[ref] = h
}

func (a *Adapter) unchanged(ref core.MessageRef, r rendered) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	h, ok := a.shown[ref]
	return ok && h == renderedHash(r)
}

// renderedHash is what tells a state change apart: for a card its id,
// status, outcome, output and buttons (not every byte of the embed: the
// engine re-sends an open card after a refusal, and details such as the
// expiry line may be formatted afresh); for text, the text.
func renderedHash(r rendered) [32]byte {
	v := struct {
		C string
		S string
		K []discordgo.MessageComponent
	}{C: r.content, S: r.state, K: r.components}
	b, _ := json.Marshal(v)
	return sha256.Sum256(b)
}

// handleInteraction converts, delivers and answers one interaction. p.http
// is set in http mode.
func (a *Adapter) handleInteraction(ctx context.Context, ix *discordgo.Interaction, httpAnswer chan *discordgo.InteractionResponse) {
	in := interactionToTurn(ix, a.cfg.allowedGuildChannel, a.cfg.Name, a.method())
	p := &pendingIx{ix: ix, http: httpAnswer}
	if ix != nil && ix.Message != nil && ix.ChannelID != "" {
		p.ref = messageRef(ix.ChannelID, ix.Message.ID)
	}
	answer := func(resp *discordgo.InteractionResponse) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.responded {
			// The deadline answered first (a slow store): what is left to
			// say goes to the user alone as a follow-up.
			if resp.Data != nil && resp.Data.Flags&ephemeral != 0 {
				go a.followUp(context.Background(), p.ix, resp.Data.Content)
			}
			return
		}
		if err := a.respondLocked(ctx, p, resp); err != nil {
			a.log.Warn("discord: could not answer an interaction", slog.Any("err", err))
		}
	}
	log := a.log
	if ix != nil {
		log = log.With(slog.String("interaction", ix.ID))
	}
	switch in.act {
	case actMalformed:
		log.Warn("discord interaction malformed; dropped", slog.String("reason", in.reason))
		if ix != nil && ix.Token != "" && ix.ID != "" {
			answer(ephemeralText("Silas could not read this request."))
		}
		return
	case actRefuse:
		log.Info("discord interaction refused", slog.String("reason", in.reason))
		answer(ephemeralText(in.reason))
		return
	case actIgnore:
		return
	}
	inbox := a.currentInbox()
	if inbox == nil {
		answer(ephemeralText("Silas is starting or stopping; please try again in a moment."))
		return
	}
	t := in.turn
	// The visible record of a command; Silas's answer (a card, a reply)
	// follows as its own message, which taps then update.
	record := &discordgo.InteractionResponse{Type: discordgo.InteractionResponseChannelMessageWithSource,
		Data: &discordgo.InteractionResponseData{Content: "`" + strings.ReplaceAll(cutRunes(t.Text, 200), "`", "'") + "`", AllowedMentions: noMentions()}}
	if t.Tap == nil {
		// Discord waits 3 s for the first answer. When storing the
		// command takes longer (a slow database), the record goes out
		// first and any later word is an ephemeral follow-up.
		early := record
		if t.ChatKind == core.ChatGroup && strings.HasPrefix(t.Text, "/secret") {
			early = ephemeralText("I will send you a direct message with the secure form.")
		}
		time.AfterFunc(a.answerBy, func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if !p.responded {
				if err := a.respondLocked(context.Background(), p, early); err != nil {
					a.log.Warn("discord: could not answer a command in time", slog.Any("err", err))
				}
			}
		})
	}
	convChannel := ix.ChannelID
	if t.Tap == nil && t.ChatKind == core.ChatGroup && strings.HasPrefix(t.Text, "/secret") {
		// The secure form's link is for the requester alone: it goes to
		// their DM, never into a guild channel.
		dm, err := a.rest.UserChannelCreate(in.user, discordgo.WithContext(ctx))
		if err != nil || dm == nil || !snowflakeRe.MatchString(dm.ID) {
			answer(ephemeralText("I could not open a direct message with you; allow DMs from this server's members and try again."))
			return
		}
		t.Conversation, t.ChatKind = conversation(a.cfg.Name, dm.ID), core.ChatDirect
		in.guild, convChannel = "", dm.ID
	}
	a.convs.start(convChannel, in.guild, in.user, ix.ID, a.now())
	if t.Tap != nil {
		// The core answers the tap once, through this interaction's token;
		// within answerBy, as its response. Registered before Deliver: the
		// answer may come before Deliver returns.
		t.TapHandle = encodeIx(ix)
		if a.ixs.add(t.EventID, p) {
			time.AfterFunc(a.answerBy, func() { a.deadline(t.EventID, p) })
		}
	}
	res, err := inbox.Deliver(ctx, t)
	var rej *core.RejectedError
	switch {
	case errors.As(err, &rej):
		log.Warn("discord turn rejected by the core", slog.String("reason", rej.Reason))
		a.ixs.remove(t.EventID, p)
		answer(ephemeralText("Not accepted: " + rej.Reason))
		return
	case err != nil:
		log.Error("discord: could not store an interaction", slog.Any("err", err))
		a.ixs.remove(t.EventID, p)
		answer(ephemeralText("Silas could not take this right now; please try again."))
		return
	}
	if t.Tap != nil {
		if res.Duplicate {
			a.ixs.remove(t.EventID, p)
			answer(&discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredMessageUpdate})
		}
		return
	}
	switch {
	case res.Duplicate:
		answer(ephemeralText("Already received."))
	case convChannel != ix.ChannelID:
		answer(ephemeralText("I sent you a direct message with the secure form."))
	default:
		answer(record)
	}
}

func (a *Adapter) method() string {
	if a.cfg.Mode == ModeHTTP {
		return MethodHTTP
	}
	return MethodGateway
}

// ServeHTTP is the interactions endpoint (http mode). The signature over
// timestamp + raw body is checked before anything is parsed, and the
// timestamp must be within the window (discordgo's VerifyInteraction does
// not check freshness, so a recorded request could be replayed); any
// failure is 401 and nothing is stored. Discord probes endpoints with bad
// signatures and removes those that accept them.
func (a *Adapter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if a.cfg.pubKey == nil {
		http.Error(w, "interactions are not configured", http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxInteractionBody+1))
	if err != nil || len(body) > maxInteractionBody {
		http.Error(w, "bad request", http.StatusUnauthorized)
		return
	}
	if !a.verify(r.Header.Get("X-Signature-Ed25519"), r.Header.Get("X-Signature-Timestamp"), body) {
		a.log.Info("discord: interaction with a bad or stale signature refused")
		http.Error(w, "invalid request signature", http.StatusUnauthorized)
		return
	}
	var ix discordgo.Interaction
	if err := json.Unmarshal(body, &ix); err != nil {
		http.Error(w, "malformed interaction", http.StatusBadRequest)
		return
	}
	if ix.Type == discordgo.InteractionPing {
		writeJSON(w, &discordgo.InteractionResponse{Type: discordgo.InteractionResponsePong})
		return
	}
	answer := make(chan *discordgo.InteractionResponse, 1)
	go a.handleInteraction(context.WithoutCancel(r.Context()), &ix, answer)
	// Discord waits 3 s; handleInteraction answers taps within answerBy.
	t := time.NewTimer(a.answerBy + 400*time.Millisecond)
	defer t.Stop()
	select {
	case resp := <-answer:
		writeJSON(w, resp)
	case <-t.C:
		a.log.Warn("discord: an interaction had no answer in time")
		http.Error(w, "no answer in time", http.StatusServiceUnavailable)
	case <-r.Context().Done():
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// verify checks an interaction's signature and timestamp.
func (a *Adapter) verify(sigHex, ts string, body []byte) bool {
	sig, err := hex.DecodeString(sigHex)
	if err != nil || len(sig) != ed25519.SignatureSize || ts == "" || len(ts) > 20 {
		return false
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false
	}
	if d := a.now().Sub(time.Unix(sec, 0)); d > a.cfg.TimestampWindow || d < -a.cfg.TimestampWindow {
		return false
	}
	msg := make([]byte, 0, len(ts)+len(body))
	msg = append(append(msg, ts...), body...)
	return ed25519.Verify(a.cfg.pubKey, msg, sig)
}
