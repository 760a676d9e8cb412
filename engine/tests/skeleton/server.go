package orders

import (
    "encoding/json"
    "errors"
    "fmt"
    "net/http"
    "sync"
    "time"
)

// ErrInvalidOrder is returned when an order fails validation.
var ErrInvalidOrder = errors.New("invalid order")

// Item is one line of an order.
type Item struct {
    SKU        string `json:"sku"`
    Quantity   int    `json:"quantity"`
    PriceCents int64  `json:"price_cents"`
}

// Order is a customer order as stored by the server.
type Order struct {
    ID        string    `json:"id"`
    Customer  string    `json:"customer"`
    Items     []Item    `json:"items"`
    CreatedAt time.Time `json:"created_at"`
}

// Server serves the order API from an in-memory store.
type Server struct {
    mu       sync.RWMutex
    orders   map[string]Order
    maxItems int
    clock    func() time.Time
}

// NewServer returns a server that accepts at most maxItems lines per order.
func NewServer(maxItems int) *Server {
    return &Server{
        orders:   make(map[string]Order),
        maxItems: maxItems,
        clock:    time.Now,
    }
}

// Count reports how many orders are stored.
func (s *Server) Count() int {
    s.mu.RLock()
    defer s.mu.RUnlock()
    return len(s.orders)
}

// Routes wires the handlers into a mux.
func (s *Server) Routes() http.Handler {
    mux := http.NewServeMux()
    mux.HandleFunc("/orders", s.handleCreateOrder)
    mux.HandleFunc("/orders/summary", s.handleSummary)
    return mux
}

func (s *Server) validate(o Order) error {
    if o.ID == "" || len(o.Items) == 0 || len(o.Items) > s.maxItems {
        return fmt.Errorf("%w: id %q with %d items", ErrInvalidOrder, o.ID, len(o.Items))
    }
    return nil
}

func (s *Server) handleCreateOrder(w http.ResponseWriter, r *http.Request) {
    if r.Method != http.MethodPost {
        http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
        return
    }
    var incomingOrder Order
    decoder := json.NewDecoder(r.Body)
    decoder.DisallowUnknownFields()
    if err := decoder.Decode(&incomingOrder); err != nil {
        http.Error(w, fmt.Sprintf("decode: %v", err), http.StatusBadRequest)
        return
    }
    if err := s.validate(incomingOrder); err != nil {
        http.Error(w, err.Error(), http.StatusUnprocessableEntity)
        return
    }
    incomingOrder.CreatedAt = s.clock().UTC()
    s.mu.Lock()
    _, duplicateOrder := s.orders[incomingOrder.ID]
    if !duplicateOrder {
        s.orders[incomingOrder.ID] = incomingOrder
    }
    s.mu.Unlock()
    if duplicateOrder {
        http.Error(w, "order already exists", http.StatusConflict)
        return
    }
    w.Header().Set("Content-Type", "application/json")
    w.WriteHeader(http.StatusCreated)
    _ = json.NewEncoder(w).Encode(incomingOrder)
}

func (s *Server) handleSummary(w http.ResponseWriter, r *http.Request) {
    sinceParam := r.URL.Query().Get("since")
    cutoffTime := time.Time{}
    if sinceParam != "" {
        parsedSince, err := time.Parse(time.RFC3339, sinceParam)
        if err != nil {
            http.Error(w, "bad since parameter", http.StatusBadRequest)
            return
        }
        cutoffTime = parsedSince
    }
    revenueByCustomer := make(map[string]int64)
    matchedOrders := 0
    s.mu.RLock()
    for _, order := range s.orders {
        if order.CreatedAt.Before(cutoffTime) {
            continue
        }
        matchedOrders++
        for _, line := range order.Items {
            revenueByCustomer[order.Customer] += line.PriceCents * int64(line.Quantity)
        }
    }
    s.mu.RUnlock()
    w.Header().Set("Content-Type", "application/json")
    _ = json.NewEncoder(w).Encode(map[string]any{
        "orders":  matchedOrders,
        "revenue": revenueByCustomer,
        "since":   cutoffTime,
    })
}
