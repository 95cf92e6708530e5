package redact

import (
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
)

// Real-looking credentials, built so that no literal credential sits in the
// source (and so secret scanners do not flag this file).
var (
	telegram   = "123456789" + ":" + "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw8"
	slackBot   = "xox" + "b-1234567890123-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
	slackUser  = "xox" + "p-2345678901-3456789012-4567890123-0123456789abcdef0123456789abcdef"
	slackApp   = "xa" + "pp-1-A0123BCDEF4-1234567890123-0a1b2c3d4e5f60718293a4b5c6d7e8f9"
	ghp        = "gh" + "p_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3gH5"
	ghs        = "gh" + "s_" + "16C7e42F292c6912E7710c838347Ae178B4a"
	githubPAT  = "github" + "_pat_" + "11ABCDEFG0123456789abc_" + "0123456789abcdefghijABCDEFGHIJ0123456789abcdefghijABCDEFGHI"
	awsID      = "AKIA" + "Z7Q4R2XW9LMNBV3C"
	awsSTS     = "ASIA" + "Y5T6U7I8O9P0A1S2"
	awsSecret  = "kD7hQ2" + "mZ9pL4xR8vN1cB6tW3yF0gJ5sA2eU7iO"
	openai     = "sk-" + "proj-" + "Xq3Vt9Lm2Rk8Bz4Nw7Hp1Jd6Yc5Fg0Sa-" + "Tu4Ei9Oq2Wr7Zx3Cv8Bn1Mm6Kk5Ll0Pp_q"
	openaiOld  = "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0U1v2W3x4"
	anthropic  = "sk-" + "ant-api03-" + "aB1cD2eF3gH4iJ5kL6mN7oP8qR9sT0uV1wX2yZ3aB4cD5eF6gH7iJ8kL9mN0oP1qR2sT3uV4wX5yZ6aB7cD8eF9gH0iJ1kL2mN3o-AAAA"
	jwt        = "eyJ" + "hbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9" + ".eyJ" + "zdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ" + ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
	gitlab     = "gl" + "pat-" + "xQ4zR8vN2mK6pL1tW9yB"
	stripe     = "sk" + "_live_" + "51H8qYzKx2Lm4Nv6Pb8Rc0Td"
	google     = "AI" + "za" + "SyD3kF8qX1mZ5vL9pR2tW6yB0cN4hJ7gE_s"
	npm        = "npm" + "_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3gH5"
	hf         = "hf" + "_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3g"
	randomB64  = "Zm9vYmFy" + "QmF6cXV4" + "7Kp2Lr9Wn4Ty1Hs6Vb3Mx8Qz0Cj5Ud"
	pemRSA     = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq98xyzExampleExampleExample0123456789abcdef\nabcdefABCDEF0123456789+/abcdefABCDEF0123456789+/abcdefABCDEF01\n-----END RSA PRIVATE KEY-----"
	pemOpenSSH = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n-----END OPENSSH PRIVATE KEY-----"
)

type want struct {
	kind string
	text string
}

func TestScan(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		text string
		want []want
	}{
		{"telegram bot token", "my bot token is " + telegram + " thanks", []want{{KindTelegramBotToken, telegram}}},
		{"telegram in a URL path", "https://api.telegram.org/bot" + telegram + "/getMe", []want{{KindTelegramBotToken, telegram}}},
		{"slack bot", "SLACK_BOT_TOKEN=" + slackBot, []want{{KindSlackToken, slackBot}}},
		{"slack user", "`" + slackUser + "`", []want{{KindSlackToken, slackUser}}},
		{"slack app", slackApp, []want{{KindSlackToken, slackApp}}},
		{"github classic", "token: " + ghp + ".", []want{{KindGitHubToken, ghp}}},
		{"github server", "(" + ghs + ")", []want{{KindGitHubToken, ghs}}},
		{"github fine-grained", githubPAT, []want{{KindGitHubToken, githubPAT}}},
		{"aws key id", "aws_access_key_id = " + awsID, []want{{KindAWSAccessKeyID, awsID}}},
		{"aws sts key id", awsSTS + ",", []want{{KindAWSAccessKeyID, awsSTS}}},
		{"aws secret key by entropy", "secret " + awsSecret + " here", []want{{KindHighEntropy, awsSecret}}},
		{"aws secret assignment", "aws_secret_access_key=" + awsSecret, []want{{KindPassword, awsSecret}}},
		{"openai project key", "OPENAI_API_KEY=" + openai, []want{{KindAPIKey, openai}}},
		{"openai legacy key", "use " + openaiOld, []want{{KindAPIKey, openaiOld}}},
		{"anthropic key", anthropic, []want{{KindAPIKey, anthropic}}},
		{"jwt", "Authorization: Bearer " + jwt, []want{{KindJWT, jwt}}},
		{"gitlab", gitlab, []want{{KindGitLabToken, gitlab}}},
		{"stripe", stripe, []want{{KindStripeKey, stripe}}},
		{"google api key", "key=" + google + "&q=1", []want{{KindGoogleAPIKey, google}}},
		{"npm", "//registry.npmjs.org/:_authToken=" + npm, []want{{KindNPMToken, npm}}},
		{"hugging face", hf, []want{{KindHuggingFaceToken, hf}}},
		{"pem rsa", "here:\n" + pemRSA + "\nbye", []want{{KindPrivateKey, pemRSA}}},
		{"pem openssh", pemOpenSSH, []want{{KindPrivateKey, pemOpenSSH}}},
		{"pem unterminated", "oops " + pemRSA[:60], []want{{KindPrivateKey, pemRSA[:60]}}},
		{"url password", "postgres://silas:" + "s3cr3t-Pa55" + "@db:5432/silas", []want{{KindURLPassword, "s3cr3t-Pa55"}}},
		{"url password empty user", "https://:" + "tok3nvalue" + "@example.com/", []want{{KindURLPassword, "tok3nvalue"}}},
		{"password assignment", "DB_PASSWORD=" + "hunter2hunter2", []want{{KindPassword, "hunter2hunter2"}}},
		{"password json", `{"password": "` + "correct horse" + `"}`, []want{{KindPassword, "correct horse"}}},
		{"password single quoted", `password='` + "tr0ub4dor &3" + `'`, []want{{KindPassword, "tr0ub4dor &3"}}},
		{"client secret yaml", "client_secret: " + "Zq8-wX_4vB", []want{{KindPassword, "Zq8-wX_4vB"}}},
		{"random base64", "blob " + randomB64 + "==", []want{{KindHighEntropy, randomB64 + "=="}}},
		{"two tokens", ghp + " " + telegram, []want{{KindGitHubToken, ghp}, {KindTelegramBotToken, telegram}}},
		{"adjacent", ghp + "," + awsID, []want{{KindGitHubToken, ghp}, {KindAWSAccessKeyID, awsID}}},

		// Near misses and ordinary text: nothing.
		{"git sha in a sentence", "fixed in 3ad9e9df0f49c3303ad9e9df0f49c3303ad9e9df, see the log", nil},
		{"short sha", "commit 3ad9e9d", nil},
		{"sha256 checksum", "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", nil},
		{"uuid", "request 123e4567-e89b-12d3-a456-426614174000 failed", nil},
		{"upper uuid", "ID 123E4567-E89B-12D3-A456-426614174000", nil},
		{"url without credentials", "see https://github.com/silas-gateway/silas/blob/main/core/redact/redact.go#L10", nil},
		{"url with user only", "ssh://git@github.com/silas-gateway/silas.git", nil},
		{"url with port", "http://localhost:8080/path?x=1", nil},
		{"file path", "/home/Alice/Documents2/Reports/2024/Quarterly/Summary.pdf", nil},
		{"windows path", `C:\Users\Administrator\AppData\Local\Programs\Python311\python.exe`, nil},
		{"go test name", "TestRedact_HighEntropy_NoFalsePositives_On_Paths2", nil},
		{"identifier", "HTTP2ServerConnectionManagerFactoryBean", nil},
		{"build tag", "x86_64-Linux-GNU-GCC12-Release-Build-Ubuntu2204", nil},
		{"k8s name", "k8s-prod-eu-west-1-Cluster-Node-Pool-2-Worker-17", nil},
		{"telegram too short", "123456789:AAHdqTcvCH1vGWJx", nil},
		{"telegram-shaped log line", "12345678:this-is-a-long-hyphenated-name-okay", nil},
		{"telegram with 7 digits falls back to entropy", "1234567:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw8",
			[]want{{KindHighEntropy, "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw8"}}},
		{"telegram too long falls back to entropy", "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw8x",
			[]want{{KindHighEntropy, "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw8x"}}},
		{"time", "meeting at 12:30:45 on 2024-01-02", nil},
		{"slack placeholder", "set xoxb-your-token-here in the config", nil},
		{"github prefix only", "the ghp_ prefix marks classic tokens", nil},
		{"github too short", "ghp_abc123", nil},
		{"aws too short", "AKIA1234", nil},
		{"aws too long", "AKIAZ7Q4R2XW9LMNBV3CX", nil},
		{"sk words", "use the sk-learn-compatible-interface-for-models", nil},
		{"sk in a word", "task-1234567890abcdefghijABCDEFGHIJ", nil},
		{"disk name", "disk-2024-release-candidate-notes-v2", nil},
		{"jwt-ish", "eyJ is how base64 JSON starts", nil},
		{"password prose", "the password: it must be long", nil},
		{"password placeholder", "password=$DB_PASSWORD and api_key: <your key> and secret_key={{ key }}", nil},
		{"password masked", "password: ********", nil},
		{"nopassword word", "nopassword=whatever1", nil},
		{"prose", "Please deploy the staging branch after lunch and ping me when it is done.", nil},
		{"base32 id", "card abcdefghijklmnopqrstuvwxyz234567", nil},
		{"numbers", "12345678901234567890123456789012345678901234567890", nil},
		{"begin public key", "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----", nil},
		{"empty", "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Scan(c.text)
			if len(got) != len(c.want) {
				t.Fatalf("got %d findings %s, want %d", len(got), describe(c.text, got), len(c.want))
			}
			for i, w := range c.want {
				f := got[i]
				if f.Kind != w.kind || c.text[f.Start:f.End] != w.text {
					t.Fatalf("finding %d: %s, want %s %q", i, describe(c.text, got[i:i+1]), w.kind, w.text)
				}
			}
			red, fs := Redact(c.text)
			if len(fs) != len(c.want) {
				t.Fatalf("Redact findings %d", len(fs))
			}
			for _, w := range c.want {
				if strings.Contains(red, w.text) {
					t.Fatalf("redacted text still contains %q: %q", w.text, red)
				}
				if !strings.Contains(red, Replacement(w.kind)) {
					t.Fatalf("no %q in %q", Replacement(w.kind), red)
				}
			}
			if len(c.want) == 0 && red != c.text {
				t.Fatalf("clean text changed: %q", red)
			}
		})
	}
}

func describe(text string, fs []Finding) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString("[" + f.Kind + " " + text[f.Start:f.End] + "]")
	}
	return b.String()
}

func TestRedactKeepsSurroundings(t *testing.T) {
	t.Parallel()
	in := "bot " + telegram + ", repo " + ghp + "."
	out, fs := Redact(in)
	if out != "bot [redacted telegram_bot_token], repo [redacted github_token]." || len(fs) != 2 {
		t.Fatalf("%q %v", out, fs)
	}
}

func TestHighEntropyRule(t *testing.T) {
	t.Parallel()
	if HighEntropy(strings.Repeat("aB3", 20)) {
		t.Fatal("repeated pattern has low entropy")
	}
	if !HighEntropy(randomB64) {
		t.Fatal("random base64 not detected")
	}
	if Entropy("") != 0 || Entropy("aaaa") != 0 || Entropy("ab") != 1 {
		t.Fatal("Entropy")
	}
	if w := MeanWordLen("HTTPServerError"); w != 5 {
		t.Fatalf("MeanWordLen(HTTPServerError) = %v", w)
	}
}

func TestRedactValues(t *testing.T) {
	t.Parallel()
	secret := "pa55:w/rd+" + "Zq8vX4" // has characters that URL and JSON encodings change
	other := "tok" + "en-Value-77"
	basic := base64.StdEncoding.EncodeToString([]byte("alice:" + secret))
	cases := []struct {
		name string
		in   string
	}{
		{"exact", "connecting with " + secret + " now"},
		{"twice", secret + secret},
		{"query escaped", "GET /login?p=" + url.QueryEscape(secret) + "&x=1"},
		{"path escaped", "/v1/" + url.PathEscape(secret) + "/x"},
		{"json", `{"pw":"` + strings.ReplaceAll(secret, "/", `\/`) + `"}`},
		{"hex", "dump " + hex.EncodeToString([]byte(secret))},
		{"base64", "b64 " + base64.StdEncoding.EncodeToString([]byte(secret))},
		{"base64url", "b64 " + base64.RawURLEncoding.EncodeToString([]byte(secret))},
		{"basic auth", "Authorization: Basic " + basic},
		{"other value", "x " + other + " y"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := RedactValues(c.in, []string{secret, other, "ab"})
			if !strings.Contains(out, ValueReplacement) {
				t.Fatalf("not redacted: %q", out)
			}
			for _, leak := range []string{secret, other, url.QueryEscape(secret), hex.EncodeToString([]byte(secret)),
				base64.StdEncoding.EncodeToString([]byte(secret))} {
				if strings.Contains(out, leak) {
					t.Fatalf("%q still in %q", leak, out)
				}
			}
		})
	}
	// A JSON escaping the value does not need (plain "/") is still the
	// exact value; the escaped form is matched as its own pattern.
	if out := RedactValues(`{"pw":"`+secret+`"}`, []string{secret}); strings.Contains(out, secret) {
		t.Fatal(out)
	}
	// Short values are skipped; clean text is returned unchanged.
	if out := RedactValues("a b ab abc", []string{"ab", "abc", ""}); out != "a b ab abc" {
		t.Fatal(out)
	}
	if out := RedactValues("nothing here", []string{secret}); out != "nothing here" {
		t.Fatal(out)
	}
	// Overlapping values: the longest wins, nothing of either remains.
	if out := RedactValues("xx abcdef12 yy", []string{"abcd", "abcdef12"}); out != "xx "+ValueReplacement+" yy" {
		t.Fatal(out)
	}
}

// A credential found once is redacted everywhere it occurs, also inside a
// longer string that does not qualify on its own.
func TestRepeatsRedacted(t *testing.T) {
	t.Parallel()
	in := "00011271282A00aA58D997BCBlCXbRYSZ0 0011271282A00aA58D997BCBlCXbRYSZ and password=" + "hunter2hunter2" + " (hunter2hunter2)"
	out, _ := Redact(in)
	if strings.Contains(out, "0011271282A00aA58D997BCBlCXbRYSZ") || strings.Contains(out, "hunter2hunter2") {
		t.Fatalf("%q", out)
	}
}
