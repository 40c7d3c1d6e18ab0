package main

import (
	"errors"
	"testing"

	"github.com/jaild/jaild/internal/doctor"
	"github.com/jaild/jaild/internal/seccomp"
)

// jaild doctor loads the profile as the daemon does: the shipped one
// passes; a missing one is an error; a build without seccomp says so in
// doctor's terms.
func TestLoadProfile(t *testing.T) {
	p, err := loadProfile("../../seccomp-profiles/default.json")
	if errors.Is(err, seccomp.ErrNoSeccompSupport) {
		if !errors.Is(err, doctor.ErrNoSeccompSupport) {
			t.Fatalf("%v does not wrap doctor.ErrNoSeccompSupport", err)
		}
		return // this build has no seccomp: nothing more to load
	}
	if err != nil || p.DefaultAction != "SCMP_ACT_ERRNO" || p.Rules == 0 || p.Profile != "../../seccomp-profiles/default.json" {
		t.Errorf("the shipped profile: %+v, %v", p, err)
	}
	if _, err := loadProfile("/nonexistent/profile.json"); err == nil || errors.Is(err, doctor.ErrNoSeccompSupport) {
		t.Errorf("a missing profile: %v", err)
	}
}
