<?php

declare(strict_types=1);

namespace App\Repository;

use App\Entity\User;
use App\Exception\DuplicateEmailException;
use DateTimeImmutable;
use PDO;
use Psr\Log\LoggerInterface;

final class UserRepository
{
    private const TABLE = 'users';

    private array $identityMap = [];

    public function __construct(
        private PDO $connection,
        private LoggerInterface $logger,
        private int $pageSize = 50,
    ) {
    }

    public function clearIdentityMap(): void
    {
        $this->logger->debug('clearing identity map');
        $this->identityMap = [];
    }

    public function findById(int $id): ?User
    {
        $stmt = $this->connection->prepare('SELECT * FROM ' . self::TABLE . ' WHERE id = :id');
        $stmt->execute(['id' => $id]);
        $row = $stmt->fetch(PDO::FETCH_ASSOC);

        return $row === false ? null : $this->hydrate($row);
    }

    public function save(User $user): User
    {
        $normalizedEmail = strtolower(trim($user->getEmail()));
        $conflictCheck = $this->connection->prepare(
            'SELECT id FROM ' . self::TABLE . ' WHERE email = :email AND id <> :id'
        );
        $conflictCheck->execute(['email' => $normalizedEmail, 'id' => $user->getId() ?? 0]);
        if ($conflictCheck->fetchColumn() !== false) {
            throw new DuplicateEmailException($normalizedEmail);
        }
        $timestampNow = (new DateTimeImmutable())->format('Y-m-d H:i:s');
        $boundParams = [
            'email' => $normalizedEmail,
            'name' => $user->getName(),
            'updated_at' => $timestampNow,
        ];
        if ($user->getId() === null) {
            $boundParams['created_at'] = $timestampNow;
            $this->connection
                ->prepare('INSERT INTO ' . self::TABLE . ' (email, name, updated_at, created_at)'
                    . ' VALUES (:email, :name, :updated_at, :created_at)')
                ->execute($boundParams);
            $user = $user->withId((int) $this->connection->lastInsertId());
        } else {
            $boundParams['id'] = $user->getId();
            $this->connection
                ->prepare('UPDATE ' . self::TABLE . ' SET email = :email, name = :name,'
                    . ' updated_at = :updated_at WHERE id = :id')
                ->execute($boundParams);
        }
        $this->identityMap[$user->getId()] = $user;
        $this->logger->info('saved user', ['id' => $user->getId()]);

        return $user;
    }

    /**
     * @return list<User>
     */
    public function search(string $term, int $page = 1): array
    {
        $likePattern = '%' . addcslashes(trim($term), '%_') . '%';
        $pageOffset = max(0, $page - 1) * $this->pageSize;
        $searchQuery = $this->connection->prepare(
            'SELECT * FROM ' . self::TABLE
            . ' WHERE email LIKE :pattern OR name LIKE :pattern'
            . ' ORDER BY name ASC LIMIT :limit OFFSET :offset'
        );
        $searchQuery->bindValue('pattern', $likePattern);
        $searchQuery->bindValue('limit', $this->pageSize, PDO::PARAM_INT);
        $searchQuery->bindValue('offset', $pageOffset, PDO::PARAM_INT);
        $searchQuery->execute();
        $matchedUsers = [];
        while (($resultRow = $searchQuery->fetch(PDO::FETCH_ASSOC)) !== false) {
            $matchedUsers[] = $this->hydrate($resultRow);
        }
        $this->logger->debug('user search', ['term' => $term, 'hits' => count($matchedUsers)]);

        return $matchedUsers;
    }

    private function hydrate(array $row): User
    {
        $user = new User((int) $row['id'], $row['email'], $row['name']);
        $this->identityMap[$user->getId()] = $user;

        return $user;
    }
}
