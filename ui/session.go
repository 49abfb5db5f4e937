package ui

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/mcpfleet/mcpfleet/httpapi"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// Sessions.
//
// The cookie holds 32 random bytes (base64url); the database holds their SHA-256, the key that signed
// in and the expiry (persistence.CreateSession), so a copy of the table opens no session. The CSRF
// token of a session is HMAC-SHA256 keyed with the raw session id over a fixed label: a synchronizer
// token that needs no storage, survives a restart like the session, and cannot be computed without
// the cookie, which script cannot read (HttpOnly) and another site cannot make the browser send
// (SameSite=Strict). Forms send it as csrf_token, the script as the X-CSRF-Token header.
//
// The sign-in form is protected the same way before any session exists: GET /ui/ sets a short-lived
// random cookie and puts its HMAC in the form, so another site cannot sign a browser in with its own key.

// Cookie names. The __Host- names are used over TLS and with Config.SecureCookies: browsers accept such
// a cookie only with Secure, Path=/ and no Domain, so a sibling host (or a plain-HTTP answer) can neither
// set nor shadow it — which is what keeps another site from planting its own session or sign-in token.
const (
	sessionCookie       = "mcpfleet_session"
	secureSessionCookie = "__Host-mcpfleet_session"
	signinCookie        = "mcpfleet_signin"
	secureSigninCookie  = "__Host-mcpfleet_signin"
	csrfField           = "csrf_token"
	csrfHeader          = "X-CSRF-Token"
	sessionIDBytes      = 32
)

// session is a signed-in browser.
type session struct {
	id        []byte // raw session id, from the cookie
	p         persistence.Principal
	expiresAt time.Time
}

// csrf is the session's CSRF token.
func (s *session) csrf() string { return csrfToken(s.id, "mcpfleet/ui/csrf/v1") }

func csrfToken(key []byte, label string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func hashID(id []byte) []byte {
	h := sha256.Sum256(id)
	return h[:]
}

func newRandomID() ([]byte, error) {
	b := make([]byte, sessionIDBytes)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	return b, nil
}

// secure reports whether cookies for r must be Secure (and carry the __Host- names).
func (u *UI) secure(r *http.Request) bool { return r.TLS != nil || u.cfg.SecureCookies }

// sessionCookieName is the name of r's session cookie. When cookies are secure only the __Host- cookie
// is read: a plain-named one may have been set by a sibling host.
func (u *UI) sessionCookieName(r *http.Request) string {
	if u.secure(r) {
		return secureSessionCookie
	}
	return sessionCookie
}

// signinCookie returns the name and path of r's sign-in cookie (a __Host- cookie must have Path=/).
func (u *UI) signinCookie(r *http.Request) (name, path string) {
	if u.secure(r) {
		return secureSigninCookie, "/"
	}
	return signinCookie, "/ui/"
}

// cookieID returns the 32 random bytes held by r's cookie name, or nil.
func cookieID(r *http.Request, name string) []byte {
	c, err := r.Cookie(name)
	if err != nil {
		return nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil || len(b) != sessionIDBytes {
		return nil
	}
	return b
}

// errNoSession: r carries no valid session.
var errNoSession = errors.New("no valid session")

// loadSession returns r's session: errNoSession, a *httpapi.Problem (429) when r's address is past
// its failed-authentication budget (an unknown session id counts as a failure, as an unknown key
// does), or an error when the database cannot say.
func (u *UI) loadSession(r *http.Request) (*session, error) {
	id := cookieID(r, u.sessionCookieName(r))
	if id == nil {
		return nil, errNoSession
	}
	var (
		p   persistence.Principal
		exp time.Time
	)
	hash := hashID(id)
	err := u.deps.Auth.Guard(r, hash, func(ctx context.Context) (err error) {
		p, exp, err = u.deps.Store.LookupSession(ctx, hash, u.deps.Wall.Now())
		return err
	})
	if errors.Is(err, persistence.ErrNotFound) {
		return nil, errNoSession
	}
	if err != nil {
		return nil, err
	}
	if p.Role != persistence.RoleOperator && p.Role != persistence.RoleAdmin {
		return nil, errNoSession // never opened for a module key; refuse one all the same
	}
	return &session{id: id, p: p, expiresAt: exp}, nil
}

// SessionPrincipal implements httpapi.UI: the event stream accepts a dashboard session.
func (u *UI) SessionPrincipal(r *http.Request) (persistence.Principal, bool, error) {
	s, err := u.loadSession(r)
	if errors.Is(err, errNoSession) {
		return persistence.Principal{}, false, nil
	}
	if err != nil {
		return persistence.Principal{}, false, err
	}
	return s.p, true, nil
}

func (u *UI) setSessionCookie(c *gin.Context, id []byte) {
	// A browser-session cookie (no Max-Age): it goes when the browser closes; the server-side expiry
	// bounds it anyway.
	http.SetCookie(c.Writer, &http.Cookie{Name: u.sessionCookieName(c.Request), Value: base64.RawURLEncoding.EncodeToString(id), Path: "/",
		HttpOnly: true, Secure: u.secure(c.Request), SameSite: http.SameSiteStrictMode})
}

func (u *UI) clearSessionCookies(c *gin.Context) {
	for _, name := range []string{sessionCookie, secureSessionCookie} {
		if _, err := c.Request.Cookie(name); err == nil {
			http.SetCookie(c.Writer, &http.Cookie{Name: name, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
				Secure: name == secureSessionCookie || u.secure(c.Request), SameSite: http.SameSiteStrictMode})
		}
	}
}

// sameOrigin reports whether a state-changing request may have come from this site: its Origin (or,
// without one, its Referer) names this host, or the browser sent neither (a non-browser client has no
// session cookie to ride on, and SameSite=Strict plus the token cover old browsers).
func sameOrigin(r *http.Request) bool {
	src := r.Header.Get("Origin")
	if src == "" {
		src = r.Header.Get("Referer")
	}
	if src == "" {
		return true
	}
	if src == "null" {
		return false
	}
	o, err := url.Parse(src)
	if err != nil {
		return false
	}
	return strings.EqualFold(o.Host, r.Host)
}

// checkCSRF checks a state-changing request of s: its origin and its token (form field or header).
func checkCSRF(c *gin.Context, want string) bool {
	if !sameOrigin(c.Request) {
		return false
	}
	got := c.GetHeader(csrfHeader)
	if got == "" {
		got = c.PostForm(csrfField)
	}
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// signinToken returns the sign-in form's token for r, setting its cookie if r has none.
func (u *UI) signinToken(c *gin.Context) (string, error) {
	name, path := u.signinCookie(c.Request)
	if b := cookieID(c.Request, name); b != nil {
		return csrfToken(b, "mcpfleet/ui/sign-in/v1"), nil
	}
	b, err := newRandomID()
	if err != nil {
		return "", err
	}
	http.SetCookie(c.Writer, &http.Cookie{Name: name, Value: base64.RawURLEncoding.EncodeToString(b), Path: path,
		MaxAge: 3600, HttpOnly: true, Secure: u.secure(c.Request), SameSite: http.SameSiteStrictMode})
	return csrfToken(b, "mcpfleet/ui/sign-in/v1"), nil
}

func (u *UI) checkSigninToken(c *gin.Context) bool {
	name, _ := u.signinCookie(c.Request)
	b := cookieID(c.Request, name)
	if b == nil || !sameOrigin(c.Request) {
		return false
	}
	got := c.PostForm(csrfField)
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(csrfToken(b, "mcpfleet/ui/sign-in/v1"))) == 1
}

type roleSet int

const (
	anyRole   roleSet = iota // operator or admin (module keys never get a session)
	adminOnly                // remote servers are reached on an administrator's behalf only
)

// withSession runs h for a signed-in request of the right role; for a state-changing request it checks
// the CSRF token first. A request without a session is sent to sign in.
func (u *UI) withSession(roles roleSet, h func(*gin.Context, *session)) gin.HandlerFunc {
	return func(c *gin.Context) {
		s, err := u.loadSession(c.Request)
		if errors.Is(err, errNoSession) {
			if c.Request.Method == http.MethodGet {
				c.Redirect(http.StatusSeeOther, "/ui/")
				return
			}
			u.fail(c, nil, http.StatusUnauthorized, "You are not signed in (or your session ended): sign in again.", nil)
			return
		}
		if err != nil {
			u.sessionFailed(c, err)
			return
		}
		if c.Request.Method != http.MethodGet && !checkCSRF(c, s.csrf()) {
			u.fail(c, s, http.StatusForbidden, "This form is stale or did not come from this dashboard: reload the page and try again.", nil)
			return
		}
		if roles == adminOnly && s.p.Role != persistence.RoleAdmin {
			u.fail(c, s, http.StatusForbidden, "Only an administrator may do this: remote servers are reached on an administrator's behalf. Sign in with an admin key.", nil)
			return
		}
		h(c, s)
	}
}

// index is GET /ui/: the overview when signed in, else the sign-in form.
func (u *UI) index(c *gin.Context) {
	s, err := u.loadSession(c.Request)
	switch {
	case errors.Is(err, errNoSession):
		u.signInForm(c, http.StatusOK, "")
	case err != nil:
		u.sessionFailed(c, err)
	default:
		u.overview(c, s)
	}
}

// sessionFailed answers a request whose session could not be checked: 429 with Retry-After when its
// address is throttled, else 503.
func (u *UI) sessionFailed(c *gin.Context, err error) {
	if status, msg, ok := throttled(c, err); ok {
		u.fail(c, nil, status, msg, nil)
		return
	}
	u.fail(c, nil, http.StatusServiceUnavailable, "The session could not be checked right now: retry shortly.", err)
}

// throttled reports whether err is the API's refusal of a throttled address (429) and, if so, sets
// Retry-After on c and returns the status and a sentence for the browser.
func throttled(c *gin.Context, err error) (int, string, bool) {
	var p *httpapi.Problem
	if !errors.As(err, &p) || p.Status != http.StatusTooManyRequests {
		return 0, "", false
	}
	secs := max(int(math.Ceil(p.RetryAfter.Seconds())), 1)
	c.Header("Retry-After", strconv.Itoa(secs))
	return p.Status, fmt.Sprintf("Too many sign-in attempts with unknown keys or sessions came from your address: wait %d s and try again.", secs), true
}

func (u *UI) signInForm(c *gin.Context, status int, problem string) {
	tok, err := u.signinToken(c)
	if err != nil {
		u.fail(c, nil, http.StatusInternalServerError, "The sign-in form could not be prepared.", err)
		return
	}
	u.render(c, status, "signin", pageData{Title: "Sign in", SigninToken: tok, Problem: problem})
}

// signIn is POST /ui/sign-in with api_key: an operator or admin key opens a session.
func (u *UI) signIn(c *gin.Context) {
	if !u.checkSigninToken(c) {
		u.signInForm(c, http.StatusForbidden, "The sign-in form expired or did not come from this dashboard: try again.")
		return
	}
	key := strings.TrimSpace(c.PostForm("api_key"))
	if !persistence.WellFormedAPIKey(key) {
		u.signInForm(c, http.StatusUnauthorized, "That is not an mcpfleet API key (they start with mcpf_).")
		return
	}
	ctx := c.Request.Context()
	// The key is checked as the API checks a bearer key: the same cache, and the same per-address
	// throttle of failures, so a flood of the form costs what a flood of the API does.
	kr := c.Request.Clone(ctx)
	kr.Header = kr.Header.Clone()
	kr.Header.Set("Authorization", "Bearer "+key)
	p, prob := u.deps.Auth.Authenticate(kr)
	if prob != nil {
		if status, msg, ok := throttled(c, prob); ok {
			u.signInForm(c, status, msg)
			return
		}
		if prob.Status == http.StatusUnauthorized {
			u.signInForm(c, http.StatusUnauthorized, "That API key is not valid (unknown or revoked).")
			return
		}
		u.log.WarnContext(ctx, "ui: sign-in: key check failed", "status", prob.Status, "type", prob.Type, "err", prob.Err)
		u.signInForm(c, http.StatusServiceUnavailable, "The key could not be checked right now: retry shortly.")
		return
	}
	switch {
	case p.Role != persistence.RoleOperator && p.Role != persistence.RoleAdmin:
		u.signInForm(c, http.StatusForbidden, "Module keys cannot sign in to the dashboard: use an operator or admin key.")
		return
	}
	id, err := newRandomID()
	if err != nil {
		u.fail(c, nil, http.StatusInternalServerError, "The session could not be opened.", err)
		return
	}
	now := u.deps.Wall.Now()
	if err := u.deps.Store.CreateSession(ctx, p, hashID(id), now, now.Add(u.cfg.SessionTTL)); err != nil {
		u.log.WarnContext(ctx, "ui: sign-in: session not stored", "err", err)
		u.signInForm(c, http.StatusServiceUnavailable, "The session could not be opened right now: retry shortly.")
		return
	}
	name, path := u.signinCookie(c.Request)
	http.SetCookie(c.Writer, &http.Cookie{Name: name, Value: "", Path: path, MaxAge: -1, HttpOnly: true,
		Secure: u.secure(c.Request), SameSite: http.SameSiteStrictMode})
	u.setSessionCookie(c, id)
	u.log.InfoContext(ctx, "ui: signed in", "tenant_id", p.TenantID, "key_id", p.KeyID, "role", p.Role)
	c.Redirect(http.StatusSeeOther, "/ui/")
}

// signOut is POST /ui/sign-out: the session ends server-side and its cookie is cleared.
func (u *UI) signOut(c *gin.Context, s *session) {
	ctx := c.Request.Context()
	if err := u.deps.Store.RevokeSession(ctx, s.p.TenantID, hashID(s.id), u.deps.Wall.Now()); err != nil {
		u.fail(c, s, http.StatusServiceUnavailable, "You could not be signed out right now: retry shortly.", err)
		return
	}
	u.flashes.drop(s)
	u.clearSessionCookies(c)
	c.Redirect(http.StatusSeeOther, "/ui/")
}

// sessionState is GET /ui/session: whether the browser is signed in, for the script to tell a dropped
// event stream from an ended session.
func (u *UI) sessionState(c *gin.Context) {
	c.Header("Cache-Control", "no-store")
	s, err := u.loadSession(c.Request)
	switch {
	case errors.Is(err, errNoSession):
		c.JSON(http.StatusUnauthorized, gin.H{"signed_in": false})
	case err != nil:
		if status, _, ok := throttled(c, err); ok {
			c.JSON(status, gin.H{"signed_in": nil})
			return
		}
		c.JSON(http.StatusServiceUnavailable, gin.H{"signed_in": nil})
	default:
		c.JSON(http.StatusOK, gin.H{"signed_in": true, "role": s.p.Role, "expires_at": s.expiresAt.UTC()})
	}
}
