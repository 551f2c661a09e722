package client

import (
	"context"
	"net/url"

	"scistream/internal/api"
)

// An operator (a gateway role) reaches the streams of other identities
// by naming their owner; for anyone else the gateway answers
// permission_denied. An empty owner means the caller's own streams, as
// Get, Release and List.

func ownerQuery(owner string) string {
	if owner == "" {
		return ""
	}
	return "?" + url.Values{"owner": {owner}}.Encode()
}

// GetOf returns the stream uid of owner.
func (c *Client) GetOf(ctx context.Context, owner, uid string) (*api.Stream, error) {
	return c.streamDo(ctx, "GET", owner, uid, "", nil)
}

// UpdateOf changes the running stream uid of owner on this gateway.
func (c *Client) UpdateOf(ctx context.Context, owner, uid string, req *api.UpdateRequest) (*api.Stream, error) {
	return c.streamDo(ctx, "PATCH", owner, uid, "", req)
}

// ReleaseOf ends the stream uid of owner on this gateway.
func (c *Client) ReleaseOf(ctx context.Context, owner, uid string) (*api.Stream, error) {
	return c.streamDo(ctx, "DELETE", owner, uid, "", nil)
}

// ListOf returns owner's streams, or every identity's with allOwners;
// all includes ended ones.
func (c *Client) ListOf(ctx context.Context, owner string, allOwners, all bool) ([]api.Stream, error) {
	q := url.Values{}
	if owner != "" {
		q.Set("owner", owner)
	}
	if allOwners {
		q.Set("all_owners", "true")
	}
	if all {
		q.Set("all", "true")
	}
	path := "/v1/streams"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out api.StreamList
	if err := c.Do(ctx, "GET", path, nil, &out); err != nil {
		return nil, err
	}
	for i := range out.Streams {
		if err := c.checkView(&out.Streams[i], ""); err != nil {
			return nil, err
		}
	}
	return out.Streams, nil
}
