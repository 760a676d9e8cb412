using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.Logging;

namespace Shop.Payments
{
    public enum PaymentStatus
    {
        Pending,
        Authorized,
        Captured,
        Declined,
        Refunded
    }

    public sealed class PaymentRequest
    {
        public string OrderId { get; init; } = string.Empty;
        public decimal Amount { get; init; }
        public string Currency { get; init; } = "USD";
        public string CardToken { get; init; } = string.Empty;
    }

    public interface IPaymentGateway
    {
        Task<string> AuthorizeAsync(PaymentRequest request, CancellationToken ct);
        Task CaptureAsync(string authorizationId, decimal amount, CancellationToken ct);
        Task RefundAsync(string authorizationId, decimal amount, CancellationToken ct);
    }

    public class PaymentProcessor
    {
        private readonly IPaymentGateway _gateway;
        private readonly ILogger<PaymentProcessor> _logger;
        private readonly Dictionary<string, (string AuthId, decimal Amount, PaymentStatus Status)> _ledger = new();
        private readonly int _maxRetries;

        public PaymentProcessor(IPaymentGateway gateway, ILogger<PaymentProcessor> logger, int maxRetries = 3)
        {
            _gateway = gateway ?? throw new ArgumentNullException(nameof(gateway));
            _logger = logger;
            _maxRetries = maxRetries;
        }

        public PaymentStatus StatusOf(string orderId)
        {
            var known = _ledger.TryGetValue(orderId, out var entry);
            return known ? entry.Status : PaymentStatus.Pending;
        }

        public async Task<PaymentStatus> ChargeAsync(PaymentRequest request, CancellationToken ct = default)
        {
            if (request.Amount <= 0m)
            {
                throw new ArgumentOutOfRangeException(nameof(request), "amount must be positive");
            }
            string? authorizationHandle = null;
            var attemptNumber = 0;
            while (authorizationHandle is null && attemptNumber < _maxRetries)
            {
                attemptNumber++;
                try
                {
                    authorizationHandle = await _gateway.AuthorizeAsync(request, ct).ConfigureAwait(false);
                }
                catch (TimeoutException timeoutEx) when (attemptNumber < _maxRetries)
                {
                    var retryPause = TimeSpan.FromMilliseconds(200 * Math.Pow(2, attemptNumber));
                    _logger.LogWarning(timeoutEx, "authorize timed out for {OrderId}, retrying in {Delay}",
                        request.OrderId, retryPause);
                    await Task.Delay(retryPause, ct).ConfigureAwait(false);
                }
            }
            if (authorizationHandle is null)
            {
                _ledger[request.OrderId] = (string.Empty, request.Amount, PaymentStatus.Declined);
                return PaymentStatus.Declined;
            }
            await _gateway.CaptureAsync(authorizationHandle, request.Amount, ct).ConfigureAwait(false);
            _ledger[request.OrderId] = (authorizationHandle, request.Amount, PaymentStatus.Captured);
            _logger.LogInformation("captured {Amount} {Currency} for {OrderId}",
                request.Amount, request.Currency, request.OrderId);
            return PaymentStatus.Captured;
        }

        public async Task<decimal> RefundAllAsync(IEnumerable<string> orderIds, CancellationToken ct = default)
        {
            decimal refundedSum = 0m;
            var skippedOrders = new List<string>();
            foreach (var orderId in orderIds.Distinct())
            {
                if (!_ledger.TryGetValue(orderId, out var record) || record.Status != PaymentStatus.Captured)
                {
                    skippedOrders.Add(orderId);
                    continue;
                }
                await _gateway.RefundAsync(record.AuthId, record.Amount, ct).ConfigureAwait(false);
                _ledger[orderId] = (record.AuthId, record.Amount, PaymentStatus.Refunded);
                refundedSum += record.Amount;
            }
            if (skippedOrders.Count > 0)
            {
                _logger.LogWarning("skipped {Count} orders that were not captured: {Orders}",
                    skippedOrders.Count, string.Join(", ", skippedOrders));
            }
            return refundedSum;
        }
    }
}
