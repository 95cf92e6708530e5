package secretsweb

import (
	"bytes"
	"html"
	"image/color"
	"image/png"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"rsc.io/qr"
)

// TestQRPage: the one-time QR page of `silas whatsapp link`. Only its
// token opens it (a wrong or closed one is 404), it is never cached and
// reloads itself, its image is a PNG of exactly the current code and
// follows a rotation, and once linked it says so.
func TestQRPage(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	c := b.browser()
	p, link, err := b.srv.NewQRPage("Link WhatsApp", "Scan this code in WhatsApp → Settings → Linked devices → Link a device.")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(link, b.base+"/qr/") || len(strings.TrimPrefix(link, b.base+"/qr/")) < 43 {
		t.Fatalf("link %q", link)
	}
	token := strings.TrimPrefix(link, b.base+"/qr/")
	defer func() {
		if strings.Contains(b.logs.String(), token) {
			t.Error("the page's token was logged")
		}
	}()

	r := b.get(t, c, link)
	if r.status != http.StatusOK || !strings.Contains(r.body, "on its way") || !strings.Contains(r.body, `http-equiv="refresh"`) {
		t.Fatalf("before the first code: %d %s", r.status, r.body)
	}
	codes := []string{"2@first-code,abc,def,ghi", "2@second-code,jkl,mno,pqr"}
	var imgs []string
	for _, code := range codes {
		if err := p.SetCode(code); err != nil {
			t.Fatal(err)
		}
		r := b.get(t, c, link)
		if r.status != http.StatusOK || r.header.Get("Cache-Control") != "no-store" || !strings.Contains(r.body, `http-equiv="refresh"`) ||
			!strings.Contains(r.body, "Linked devices") {
			t.Fatalf("page: %d %v %s", r.status, r.header, r.body)
		}
		src := regexp.MustCompile(`<img src="([^"]+)"`).FindStringSubmatch(r.body)
		if src == nil {
			t.Fatalf("no image on the page: %s", r.body)
		}
		img := b.get(t, c, b.base+strings.ReplaceAll(src[1], "&amp;", "&"))
		if img.status != http.StatusOK || img.header.Get("Content-Type") != "image/png" || img.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("image: %d %v", img.status, img.header)
		}
		checkQR(t, []byte(img.body), code)
		imgs = append(imgs, src[1])
	}
	if imgs[0] == imgs[1] {
		t.Fatalf("the rotated code kept the image address %s (a browser may show the old one)", imgs[0])
	}

	for _, u := range []string{b.base + "/qr/", b.base + "/qr/not-the-token", b.base + "/qr/" + strings.Repeat("A", 43), b.base + "/qr/" + strings.Repeat("A", 43) + "/code.png"} {
		if r := b.get(t, c, u); r.status != http.StatusNotFound {
			t.Fatalf("%s: %d", u, r.status)
		}
	}

	p.Done("linked as +4915112345678 ✓")
	r = b.get(t, c, link)
	if r.status != http.StatusOK || !strings.Contains(html.UnescapeString(r.body), "linked as +4915112345678 ✓") || strings.Contains(r.body, "<img") ||
		strings.Contains(r.body, `http-equiv="refresh"`) {
		t.Fatalf("after linking: %d %s", r.status, r.body)
	}
	if r := b.get(t, c, b.base+imgs[1]); r.status != http.StatusNotFound {
		t.Fatalf("the code after linking: %d", r.status)
	}
	p.Close()
	if r := b.get(t, c, link); r.status != http.StatusNotFound {
		t.Fatalf("closed page: %d", r.status)
	}
}

// checkQR decodes the PNG and compares it module by module with code's
// QR matrix (4 modules of quiet zone, square modules).
func checkQR(t *testing.T, data []byte, code string) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("the image is not a PNG: %v", err)
	}
	want, err := qr.Encode(code, qr.L)
	if err != nil {
		t.Fatal(err)
	}
	side := img.Bounds().Dx()
	if img.Bounds().Dy() != side || side%(want.Size+8) != 0 {
		t.Fatalf("image %v for a %d-module code", img.Bounds(), want.Size)
	}
	scale := side / (want.Size + 8)
	black := func(x, y int) bool {
		g := color.GrayModel.Convert(img.At(img.Bounds().Min.X+(x+4)*scale+scale/2, img.Bounds().Min.Y+(y+4)*scale+scale/2)).(color.Gray)
		return g.Y < 128
	}
	for y := 0; y < want.Size; y++ {
		for x := 0; x < want.Size; x++ {
			if black(x, y) != want.Black(x, y) {
				t.Fatalf("module (%d,%d) differs from the code %q", x, y, code)
			}
		}
	}
}
