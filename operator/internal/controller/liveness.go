package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// majorLiveness tells whether another major's operator is still there, from
// the leader-election Lease every installed operator renews (the bundle
// runs it with --leader-elect). A claim is a promise to remove the
// finalizer; a major whose Lease nobody has renewed for grace (uninstalled,
// scaled to zero, crash-looping) cannot keep it, so its claims are void.
//
// The Lease is looked up by name in every namespace, since another major
// may be installed anywhere: one LIST per major at most every
// livenessRecheck, whatever the number of its stacks.
type majorLiveness struct {
	reader    client.Reader
	leaseName func(major string) string
	grace     time.Duration

	mu     sync.Mutex
	majors map[string]*leaseSeen
}

// livenessRecheck bounds how often a major's Lease is read.
const livenessRecheck = 15 * time.Second

type leaseSeen struct {
	checked time.Time
	// renewed is the latest renewal (or acquisition) of the major's Lease,
	// where names it; absentSince is when this process first found no such
	// Lease, zero while one exists.
	renewed     time.Time
	where       string
	absentSince time.Time
}

func newMajorLiveness(reader client.Reader, leaseName func(string) string, grace time.Duration) *majorLiveness {
	return &majorLiveness{reader: reader, leaseName: leaseName, grace: grace, majors: map[string]*leaseSeen{}}
}

// gone reports whether major's operator has been gone for longer than the
// grace period, and why (or, if not gone, what was seen).
func (l *majorLiveness) gone(ctx context.Context, major string) (bool, string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.majors[major]
	if s == nil {
		s = &leaseSeen{}
		l.majors[major] = s
	}
	now := time.Now()
	name := l.leaseName(major)
	if now.Sub(s.checked) >= livenessRecheck {
		var leases coordinationv1.LeaseList
		if err := l.reader.List(ctx, &leases, client.MatchingFields{"metadata.name": name}); err != nil {
			return false, "", fmt.Errorf("reading the %s operator's Lease %s: %w", major, name, err)
		}
		s.checked, s.renewed, s.where = now, time.Time{}, ""
		for _, le := range leases.Items {
			for _, t := range []*metav1.MicroTime{le.Spec.AcquireTime, le.Spec.RenewTime} {
				if t != nil && t.After(s.renewed) {
					s.renewed, s.where = t.Time, le.Namespace+"/"+le.Name
				}
			}
		}
		switch {
		case len(leases.Items) > 0:
			s.absentSince = time.Time{}
		case s.absentSince.IsZero():
			s.absentSince = now
		}
	}
	if !s.absentSince.IsZero() {
		return now.Sub(s.absentSince) > l.grace,
			fmt.Sprintf("no Lease %s exists in any namespace (for %s)", name, now.Sub(s.absentSince).Round(time.Second)), nil
	}
	return now.Sub(s.renewed) > l.grace,
		fmt.Sprintf("its Lease %s was last renewed at %s", s.where, s.renewed.UTC().Format(time.RFC3339)), nil
}
