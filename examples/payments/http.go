package payments

import (
	"encoding/json"
	"net/http"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/httpint"
)

// TransferRoute is the keyed HTTP route of the Transfer mutation, as
// httpint.New takes it.
const TransferRoute = "POST /transfers"

// TransferJSON is the JSON body of POST /transfers (without TransferID)
// and of its 201 answer.
type TransferJSON struct {
	TransferID  int64  `json:"transfer_id,omitempty"`
	FromAccount string `json:"from_account"`
	ToAccount   string `json:"to_account"`
	AmountCents int64  `json:"amount_cents"`
	Reference   string `json:"reference"`
}

// HTTPHandler serves Transfer over HTTP: POST /transfers with a
// TransferJSON body runs the same Transfer as the gRPC method, in the
// transaction the httpint middleware holds the claim in, and answers 201
// with the transfer and its Location. A request Transfer refuses
// (INVALID_ARGUMENT) is a 400 problem, which the middleware stores as the
// final answer. Serve it behind httpint.New(…, []string{TransferRoute}).
func (s *Service) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(TransferRoute, s.httpTransfer)
	return mux
}

func (s *Service) httpTransfer(w http.ResponseWriter, r *http.Request) {
	var in TransferJSON
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeHTTPProblem(w, http.StatusBadRequest, "the body is not a transfer: "+err.Error())
		return
	}
	reply, err := s.Transfer(r.Context(), &paymentspb.TransferRequest{FromAccount: in.FromAccount, ToAccount: in.ToAccount,
		AmountCents: in.AmountCents, Reference: in.Reference})
	if err != nil {
		if st, ok := status.FromError(err); ok && st.Code() == codes.InvalidArgument {
			writeHTTPProblem(w, http.StatusBadRequest, st.Message())
			return
		}
		httpint.ReportError(r, err) // a database error: the middleware retries or answers 503
		writeHTTPProblem(w, http.StatusInternalServerError, "the transfer failed")
		return
	}
	out := TransferJSON{TransferID: reply.GetTransferId(), FromAccount: reply.GetFromAccount(), ToAccount: reply.GetToAccount(),
		AmountCents: reply.GetAmountCents(), Reference: reply.GetReference()}
	b, _ := json.Marshal(out)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/transfers/"+strconv.FormatInt(out.TransferID, 10))
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(b)
}

// writeHTTPProblem answers with an RFC 9457 problem of type about:blank.
func writeHTTPProblem(w http.ResponseWriter, code int, detail string) {
	b, _ := json.Marshal(httpint.Problem{Type: "about:blank", Title: http.StatusText(code), Status: code, Detail: detail})
	w.Header().Set("Content-Type", httpint.ProblemContentType)
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
