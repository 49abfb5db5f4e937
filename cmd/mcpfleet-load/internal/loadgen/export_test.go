package loadgen

// Exports for the external tests in loadgen_test.
var (
	AnswerStatus = answerStatus
	ErrorKind    = errorKind
	Thousands    = thousands
)

// Evaluate exposes Summary.evaluate.
func (s *Summary) Evaluate() { s.evaluate() }
