// Package trust decides who a sender is to Silas: trust tags from evidence,
// config owners and allowlists, and identity bindings made by pairing and
// signed with the gateway key (a binding whose signature does not verify
// grants nothing). It also holds the direct-message access policy and the
// pairing and access-request codes. It never trusts a claim without
// evidence: an unauthenticated sender is external, whatever it says.
//
// It reads no storage itself: the stored bindings come through the one
// method of Bindings, which the store implements, so trust never imports
// the store and its tests need no database.
package trust
