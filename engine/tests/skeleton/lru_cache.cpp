// A thread-safe LRU cache with per-entry time-to-live.
#include <chrono>
#include <cstddef>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

namespace cache {

template <typename Key, typename Value>
class LruCache {
public:
    using Clock = std::chrono::steady_clock;
    using EvictionCallback = std::function<void(const Key&, const Value&)>;

    LruCache(std::size_t capacity, std::chrono::milliseconds ttl)
        : capacity_(capacity), ttl_(ttl) {}

    std::size_t size() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return order_.size();
    }

    void onEvict(EvictionCallback callback) {
        std::lock_guard<std::mutex> lock(mutex_);
        onEvict_ = std::move(callback);
    }

    std::optional<Value> get(const Key& key) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto found = index_.find(key);
        if (found == index_.end() || expiredLocked(found->second)) {
            ++misses_;
            return std::nullopt;
        }
        ++hits_;
        return touchLocked(found->second)->value;
    }

    void put(const Key& key, Value value) {
        std::lock_guard<std::mutex> lock(mutex_);
        const auto freshDeadline = Clock::now() + ttl_;
        auto existingSlot = index_.find(key);
        if (existingSlot != index_.end()) {
            existingSlot->second->value = std::move(value);
            existingSlot->second->expiresAt = freshDeadline;
            touchLocked(existingSlot->second);
            return;
        }
        while (!order_.empty() && order_.size() >= capacity_) {
            auto coldestNode = std::prev(order_.end());
            evictLocked(coldestNode);
        }
        if (capacity_ == 0) {
            return;
        }
        order_.push_front(Node{key, std::move(value), freshDeadline});
        index_.emplace(key, order_.begin());
    }

    std::size_t purgeExpired() {
        std::lock_guard<std::mutex> lock(mutex_);
        const auto sweepInstant = Clock::now();
        std::size_t purgedEntries = 0;
        auto scanCursor = order_.begin();
        while (scanCursor != order_.end()) {
            if (scanCursor->expiresAt <= sweepInstant) {
                auto doomedNode = scanCursor++;
                evictLocked(doomedNode);
                ++purgedEntries;
            } else {
                ++scanCursor;
            }
        }
        if (purgedEntries > 0 && order_.empty()) {
            index_.clear();
            index_.rehash(0);
        }
        return purgedEntries;
    }

    double hitRate() const {
        std::lock_guard<std::mutex> lock(mutex_);
        const auto lookups = hits_ + misses_;
        return lookups == 0 ? 0.0 : static_cast<double>(hits_) / lookups;
    }

private:
    struct Node {
        Key key;
        Value value;
        Clock::time_point expiresAt;
    };
    using NodeIter = typename std::list<Node>::iterator;

    NodeIter touchLocked(NodeIter node) {
        order_.splice(order_.begin(), order_, node);
        return node;
    }

    bool expiredLocked(NodeIter node) {
        if (Clock::now() < node->expiresAt) {
            return false;
        }
        evictLocked(node);
        return true;
    }

    void evictLocked(NodeIter node) {
        if (onEvict_) {
            onEvict_(node->key, node->value);
        }
        index_.erase(node->key);
        order_.erase(node);
    }

    std::size_t capacity_;
    std::chrono::milliseconds ttl_;
    std::list<Node> order_;
    std::unordered_map<Key, NodeIter> index_;
    EvictionCallback onEvict_;
    mutable std::mutex mutex_;
    std::size_t hits_ = 0;
    std::size_t misses_ = 0;
};

}  // namespace cache

using SessionCache = cache::LruCache<std::string, std::string>;
