package httpapi

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
)

// TestHeartbeatAnswerJSON: the heartbeat's hand-written answer is byte for byte what encoding/json
// writes for it, for every status and times with and without fractions, offsets and the years json
// refuses (those go through encoding/json itself), and it allocates nothing beyond the buffer it is
// given room in.
func TestHeartbeatAnswerJSON(t *testing.T) {
	times := []time.Time{
		time.Date(2026, 12, 2, 5, 6, 7, 0, time.UTC),
		time.Date(2026, 12, 2, 5, 6, 7, 120000000, time.UTC),
		time.Date(2026, 12, 2, 5, 6, 7, 123456789, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 6, 1, 12, 0, 0, 1, time.FixedZone("x", 5*3600+1800)),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	statuses := append(health.Statuses(), health.Status(`odd"<status>\`))
	for _, st := range statuses {
		for _, at := range times {
			a := heartbeatAnswer{ServerID: uuid.New(), Status: st, LastHeartbeatAt: at}
			want, err := json.Marshal(a)
			if err != nil {
				want = []byte("{}")
			}
			if got := a.appendJSON(nil); string(got) != string(want) {
				t.Errorf("status %q at %s:\n got %s\nwant %s", st, at, got, want)
			}
		}
	}
	a := heartbeatAnswer{ServerID: uuid.New(), Status: health.Healthy, LastHeartbeatAt: times[2]}
	buf := make([]byte, 0, 128)
	if allocs := testing.AllocsPerRun(100, func() { buf = a.appendJSON(buf[:0]) }); allocs != 0 {
		t.Fatalf("the answer allocates %.0f times", allocs)
	}
}

// TestWriteJSONAnswersAsDataDoes: on the wire writeJSON's answer is c.Data's — status, headers (a
// Content-Type already set kept, the Content-Length net/http adds), body — a failed write is recorded as
// the request's error as c.Data records it, and it makes at least three allocations fewer a request (gin's
// Data value, the content type's slice, the Content-Length's string and slice).
func TestWriteJSONAnswersAsDataDoes(t *testing.T) {
	body := []byte(`{"server_id":"x"}`)
	engine := func(write func(*gin.Context), errs *[]error) http.Handler {
		e := gin.New()
		e.POST("/x", func(c *gin.Context) {
			if c.Query("type") != "" {
				c.Header("Content-Type", c.Query("type"))
			}
			write(c)
			*errs = nil
			for _, err := range c.Errors {
				*errs = append(*errs, err.Err)
			}
		})
		return e
	}
	var dataErrs, oursErrs []error
	data := engine(func(c *gin.Context) { c.Data(http.StatusOK, jsonContentType, body) }, &dataErrs)
	ours := engine(func(c *gin.Context) { writeJSON(c, http.StatusOK, body) }, &oursErrs)
	dataSrv, oursSrv := httptest.NewServer(data), httptest.NewServer(ours)
	defer dataSrv.Close()
	defer oursSrv.Close()
	answer := func(url string) (int, http.Header, string) {
		res, err := http.Post(url, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		res.Header.Del("Date")
		return res.StatusCode, res.Header, string(b)
	}
	for _, target := range []string{"/x", "/x?type=application/problem%2Bjson"} {
		wc, wh, wb := answer(dataSrv.URL + target)
		gc, gh, gb := answer(oursSrv.URL + target)
		if gc != wc || !reflect.DeepEqual(gh, wh) || gb != wb {
			t.Errorf("%s: answered %d %v %q, c.Data %d %v %q", target, gc, gh, gb, wc, wh, wb)
		}
	}
	data.ServeHTTP(failingWriter{httptest.NewRecorder()}, httptest.NewRequest("POST", "/x", nil))
	ours.ServeHTTP(failingWriter{httptest.NewRecorder()}, httptest.NewRequest("POST", "/x", nil))
	if len(dataErrs) != 1 || len(oursErrs) != 1 || !errors.Is(oursErrs[0], errWriteFailed) {
		t.Errorf("a failed write: errors %v, c.Data's %v", oursErrs, dataErrs)
	}
	if raceEnabled {
		return // the race detector changes allocation counts
	}
	if o, d := allocsPerRequest(ours, "/x"), allocsPerRequest(data, "/x"); o > d-3 {
		t.Errorf("writeJSON allocates %.0f times a request, c.Data %.0f: want three fewer", o, d)
	}
}

var errWriteFailed = errors.New("connection gone")

// failingWriter is a ResponseWriter whose writes fail, as they do once the client went away.
type failingWriter struct{ *httptest.ResponseRecorder }

func (failingWriter) Write([]byte) (int, error) { return 0, errWriteFailed }
