package render

import (
	"strings"

	"github.com/silas-gateway/silas/cards"
)

// quoteMarks are replaced inside quoted words so that the words cannot
// close the quotation and go on in Silas's voice.
var quoteMarks = strings.NewReplacer("“", "\"", "”", "\"")

// Said renders someone else's words for a card: `The assistant says:
// “…”.` A model's or a stranger's text is never put on a card as if
// Silas said it ("ALREADY APPROVED by the owner" in a rationale reads as
// Silas's claim); it is labelled with who wrote it, kept on one line, in
// quotation marks it cannot close, with invisible characters shown.
func Said(who, words string) string {
	return who + " says: " + Quoted(words) + "."
}

// Quoted returns words on one line in “…”, their own quotation marks
// made plain and invisible characters shown.
func Quoted(words string) string {
	return "“" + cards.ShowInvisible(quoteMarks.Replace(strings.Join(strings.Fields(words), " "))) + "”"
}
