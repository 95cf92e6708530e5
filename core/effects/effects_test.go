package effects

import "testing"

func TestCloneIsIndependent(t *testing.T) {
	base := Effects{Replies: []string{"a"}}
	c := base.Clone()
	c.Replies = append(c.Replies, "b")
	c.Replies[0] = "x"
	if len(base.Replies) != 1 || base.Replies[0] != "a" {
		t.Fatalf("the clone changed the original: %v", base.Replies)
	}
}

func TestAdd(t *testing.T) {
	tests := []struct {
		name    string
		a, b    Effects
		replies int
		toast   string
		refused string
	}{
		{name: "appends, keeps toast", a: Effects{Replies: []string{"1"}, Toast: "t"}, b: Effects{Replies: []string{"2"}}, replies: 2, toast: "t"},
		{name: "later toast and refusal win", a: Effects{Toast: "t"}, b: Effects{Toast: "u", Refused: "r"}, toast: "u", refused: "r"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.a.Add(tc.b)
			if len(tc.a.Replies) != tc.replies || tc.a.Toast != tc.toast || tc.a.Refused != tc.refused {
				t.Fatalf("Add = %+v", tc.a)
			}
		})
	}
}
